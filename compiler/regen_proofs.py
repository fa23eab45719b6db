"""Old path of `python3 -m compiler.regress.regen_proofs`, kept so existing commands work."""

import sys

from compiler.regress.regen_proofs import main

if __name__ == "__main__":
    sys.exit(main())
