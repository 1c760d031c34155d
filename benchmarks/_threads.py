"""The BLAS thread pools pinned before numpy and torch load: imported first by a benchmark that takes ``--threads N``.

:data:`THREADS` is the command line's ``--threads`` value (2 without one). ``OMP_NUM_THREADS``,
``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` are set to it on import, which takes effect only before
those libraries load.
"""

import os
import sys

THREADS = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 2
"""The threads of this process (and its children, through the environment)."""

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_var] = str(THREADS)
