"""BAGEL (ByteDance-Seed/BAGEL-7B-MoT): text + image in, text or image out. Components grow here."""
