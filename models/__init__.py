"""wgc.models: one .walk program per model family, with its PyTorch components and tiny presets."""
