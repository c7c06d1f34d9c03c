"""Methods built on the Stein kernel: KSD-optimal weights' solvers (the active set)."""
