"""What the sample scripts' CPU tests share: run a script with a Python module hidden behind a
stand-in that fails to import, so that a test means the same on a machine that has the module."""
import os
import subprocess
import sys
import tempfile


def run_script(script, args, hide=None, timeout=60):
    """Runs `python3 script args...` (with `hide`, a module name, made unimportable); returns
    (exit code, stdout + stderr)."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as standin:
        if hide:
            os.makedirs(os.path.join(standin, hide))
            with open(os.path.join(standin, hide, "__init__.py"), "w") as f:
                f.write(f"raise ImportError('{hide} hidden by the test')\n")
            env["PYTHONPATH"] = standin + os.pathsep + env.get("PYTHONPATH", "")
        p = subprocess.run([sys.executable, script, *args], env=env, capture_output=True,
                           text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr
