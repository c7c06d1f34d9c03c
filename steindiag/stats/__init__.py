"""NumPy-only statistics: autocorrelation times for the bootstraps and tests."""
