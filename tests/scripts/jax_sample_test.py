#!/usr/bin/env python3
"""samples/jax/train.py without a GPU: its flags, its errors and its skip. jax is hidden behind a
stand-in that fails to import, so the test means the same on a machine that has it."""
import os
import unittest

from hidden_module import run_script

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE = os.path.join(HERE, "..", "..", "samples", "jax", "train.py")


def run(*args):
    return run_script(SAMPLE, args, hide="jax")


class JaxSample(unittest.TestCase):
    def test_help_names_both_models(self):
        rc, out = run("--help")
        self.assertEqual(rc, 0, out)
        for word in ("mlp", "transformer", "--steps", "--layers", "--seq"):
            self.assertIn(word, out)

    def test_without_jax_it_skips_with_77(self):
        rc, out = run("--model", "transformer", "--steps", "2")
        self.assertEqual(rc, 77, out)
        self.assertTrue(out.startswith("skip: jax is not importable"), out)

    def test_bad_arguments_exit_2_with_a_reason(self):
        for args, reason in ((("--layers", "0"), "--layers must be at least 1"),
                             (("--model", "transformer", "--width", "100", "--heads", "16"),
                              "--width must be a multiple of --heads"),
                             (("--model", "cnn"), "invalid choice")):
            rc, out = run(*args)
            self.assertEqual(rc, 2, (args, out))
            self.assertIn(reason, out)


if __name__ == "__main__":
    unittest.main()
