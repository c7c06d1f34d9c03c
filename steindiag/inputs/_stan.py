"""Stan as input (stub)."""
def is_stan_input(data, model=None):
    return False
def read_stan(*a, **k):
    raise NotImplementedError
