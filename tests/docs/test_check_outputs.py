#!/usr/bin/env python3
"""check_outputs.py's reading of the docs: which shown outputs are whole and which excerpts."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_outputs as outputs  # noqa: E402


def read(markdown):
    with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as f:
        f.write(markdown)
    try:
        return [(commands, expected, excerpt) for _, commands, expected, excerpt in outputs.claims(f.name)]
    finally:
        os.unlink(f.name)


def shown(prose, block="    a\n    b\n"):
    return read(f"```sh\nbuild/kvsim info t.h5\n```\n\n{prose}\n\n{block}\nafter\n")


class Claims(unittest.TestCase):
    def test_prints_colon_shows_the_whole_output(self):
        self.assertEqual(shown("prints:"), [(["build/kvsim info t.h5"], ["a", "b"], False)])
        self.assertEqual(shown("For each budget it\nprints:")[0][2], False)

    def test_a_qualified_prints_shows_an_excerpt(self):
        for prose in ("prints (excerpt):", "prints, among other lines:", "prints (after the generated text):",
                      "prints, at its end:"):
            self.assertEqual(shown(prose), [(["build/kvsim info t.h5"], ["a", "b"], True)], prose)

    def test_an_elision_makes_an_excerpt(self):
        self.assertEqual(shown("prints:", "    a\n    ...\n    b\n"), [(["build/kvsim info t.h5"], ["a", "b"], True)])

    def test_a_plain_block_is_an_excerpt(self):
        claims = read("```sh\nbuild/kvsim info t.h5\n```\n\n```\na\n```\n")
        self.assertEqual(claims, [(["build/kvsim info t.h5"], ["a"], True)])

    def test_a_paragraph_without_prints_shows_nothing(self):
        self.assertEqual(shown("writes:"), [])


if __name__ == "__main__":
    unittest.main()
