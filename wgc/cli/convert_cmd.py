"""`wgc convert`: one-time, offline conversions of upstream checkpoints into the safetensors files wgc
loads (wgc reads no pickle when it serves). `wgc convert vjepa2-ac IN.pt OUT_DIR`: V-JEPA 2-AC's
torch.save checkpoint (models/vjepa2_ac/convert.py; docs/models/vjepa2_ac.md, Weights)."""

from __future__ import annotations

from pathlib import Path

import click


@click.group()
def convert() -> None:
    """Convert an upstream checkpoint to safetensors, once."""


@convert.command("vjepa2-ac")
@click.argument("source", type=click.Path(dir_okay=False, path_type=Path))
@click.argument("out_dir", type=click.Path(file_okay=False, path_type=Path))
@click.option("--heads", type=click.IntRange(min=1), default=None, help="Attention heads (default: width / 64).")
@click.option("--grid", type=click.IntRange(min=1), default=16, show_default=True, help="Patches per side of a frame.")
@click.option("--max-frames", type=click.IntRange(min=1), default=32, show_default=True,
              help="Frame blocks the predictor covers (its training mask).")
def vjepa2_ac(source: Path, out_dir: Path, heads: int | None, grid: int, max_frames: int) -> None:
    """V-JEPA 2-AC's vjepa2-ac-vitg.pt -> OUT_DIR/ac_predictor.safetensors, ac_predictor.json, ac_encoder.safetensors."""
    from wgc.models.vjepa2_ac.convert import ConvertError
    from wgc.models.vjepa2_ac.convert import convert as run

    try:
        lines = run(source, out_dir, heads, grid, max_frames)
    except ConvertError as err:
        raise click.ClickException(str(err)) from None
    for line in lines:
        click.echo(line)
