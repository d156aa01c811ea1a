"""The one error type of the analysis: input that cannot be analysed."""


class AnalysisError(RuntimeError):
    """Input that cannot be analysed; the message names the file (and line, field)."""
