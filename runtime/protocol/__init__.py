"""What the coordinator and the workers say to each other, and how it travels.

    messages.py   every message as a small typed struct; the handler-table check (check_handlers)
    codec.py      the one wire codec: msgpack plus one raw frame per tensor, no pickle
"""
