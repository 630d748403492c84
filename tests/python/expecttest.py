"""Stand-in for the `expecttest` package, which Debian does not ship.

torch.testing._internal imports it for expect-file tests; the OpInfo database (op_db) only
needs the names to exist. Nothing here runs an expect test.
"""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    """The base class common_utils derives its TestCase from."""
