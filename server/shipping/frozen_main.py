"""The entry point of a frozen bundle: `loreguard` with the bundle's own model as the default
(`manifest`). Nothing in the package imports this module; PyInstaller starts from it."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from loreguard.server.shipping.manifest import bundle_dir, with_bundled_model


def main(argv: Sequence[str] | None = None) -> int:
    from loreguard.server.cli import main as cli_main
    from loreguard.server.inference.base import BackendError
    from loreguard.server.inference.model_files import ModelNotFound

    args = sys.argv[1:] if argv is None else argv
    try:
        return cli_main(with_bundled_model(args, bundle_dir()))
    except (BackendError, ModelNotFound) as exc:
        # A player's log gets the reason in one line, not a frozen traceback.
        print(f"loreguard-sidecar: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
