"""The command-line tools `prover` and `npuc` and the check run they share.

Importing this package (every CLI entry point does, before numpy) caps OpenBLAS at one
thread unless the environment already says otherwise: the tool runs BLAS on one thread
anyway (`npu_backend.exact_matmul`), and OpenBLAS starts its spinning pool at numpy's
import, which cost 0.1 s of CPU per run on 2 cores (a third of a 1-site check's start-up;
bench/README.md, "Start-up").
"""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
