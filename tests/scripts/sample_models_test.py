#!/usr/bin/env python3
"""samples/pytorch/models.py without a GPU: its flags, its errors and its skip. torch is hidden
behind a stand-in that fails to import, so the test means the same on a machine that has it."""
import os
import unittest

from hidden_module import run_script

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "..", "samples", "pytorch", "models.py")


def run(*args, hide_torch=True):
    return run_script(MODELS, args, hide="torch" if hide_torch else None)


class SampleModels(unittest.TestCase):
    def test_help_names_every_model_and_the_baseline_flags(self):
        rc, out = run("--help")
        self.assertEqual(rc, 0, out)
        for word in ("vit", "llama", "bert", "lstm", "convnext", "--offload", "--checkpoint",
                     "--deterministic"):
            self.assertIn(word, out)

    def test_without_torch_it_skips_with_77(self):
        rc, out = run("--model", "vit", "--offload")
        self.assertEqual(rc, 77, out)
        self.assertTrue(out.startswith("skip: "), out)

    def test_bad_arguments_exit_2_with_a_reason(self):
        for args, said in ((("--model", "resnet"), "invalid choice"),
                           ((), "--model"),
                           (("--model", "vit", "--batch", "0"), "at least 1"),
                           (("--model", "llama", "--steps", "0"), "at least 1"),
                           (("--model", "lstm", "--checkpoint"), "no blocks to checkpoint")):
            rc, out = run(*args)
            self.assertEqual(rc, 2, (args, out))
            self.assertIn(said, out, args)


if __name__ == "__main__":
    unittest.main()
