"""Test isolation shared by every test module."""
from __future__ import annotations

import logging

import pytest


@pytest.fixture(autouse=True)
def _restore_logging_handlers():
    """A CLI run in-process (Hydra's job logging, `-m` included) attaches handlers bound
    to the test's captured stream; once pytest closes that stream, a later test's log
    call prints a "Logging error" traceback. Put every logger's handlers back as they
    were before the test."""
    loggers = [logging.getLogger()] + [logging.getLogger(n) for n in
                                       list(logging.root.manager.loggerDict)]
    saved = {lg: list(lg.handlers) for lg in loggers}
    yield
    for lg in [logging.getLogger()] + [logging.getLogger(n) for n in
                                       list(logging.root.manager.loggerDict)]:
        keep = saved.get(lg, [])
        for h in list(lg.handlers):
            if h not in keep:
                lg.removeHandler(h)
