"""The `vmem` command line. Importing it first sets BLAS threading for the process.

Both entry points (the `vmem` console script and `python -m veadk_mem`) import this
package before any command module, and so before anything imports numpy: the one place
where OPENBLAS_NUM_THREADS and its kin still take effect (see prepare_blas).
"""

from veadk_mem.blas import prepare_blas

prepare_blas()
