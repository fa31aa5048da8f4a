"""Images and audio in and out of the frontend.

    decode.py        data URLs and uploads in: images (Pillow) and WAV, with size limits, as tensors
    audio.py         PCM16 and WAV out, whole or streamed
    png.py           image tensors as PNG (Pillow)
"""
