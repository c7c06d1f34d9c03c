"""The trace reader of the input layer, scores included, as the tests call it."""

from steindiag.inputs._trace import read_trace


def prepare_trace(data, model=None, **options):
    """``read_trace(...).with_scores()``: the ``SteinInput`` of a trace."""
    return read_trace(data, model, **options).with_scores()
