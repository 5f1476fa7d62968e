"""``python tests/trainer/run_in_process.py key=value ...``: ``main_ppo``'s run with ``trainer.single_process=true``
(the workers inside this one process, ``LocalWorkerGroup``, instead of Ray actors).

The kill test's training process: SIGKILL takes the trainer and its workers down together, as losing a node does,
and a start costs ~10 s less than starting a Ray cluster. Config handling, data, reward, ``fit`` and the checkpoint
code are ``main_ppo.run_ppo``'s own; unlike ``python -m verl.trainer.main_ppo`` no Hydra output directory is made.
Exit status: 0 when done, ``128 + signal`` after a ``trainer.save_on_exit`` stop, 1 on an error.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # run as a script from a checkout: make ``verl`` importable
    sys.path.insert(0, str(REPO_ROOT))


def main(overrides: list[str]) -> None:
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import run_ppo, setup_logging

    setup_logging()
    run_ppo(load_default_config([*overrides, "trainer.single_process=true"]))


if __name__ == "__main__":
    main(sys.argv[1:])
