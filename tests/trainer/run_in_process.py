"""``python tests/trainer/run_in_process.py key=value ...``: ``main_ppo``'s run with the workers inside
this one process (``LocalWorkerGroup``) instead of Ray actors.

The kill test's training process: SIGKILL takes the trainer and its workers down together, as losing a node does,
and a start costs ~10 s less than starting a Ray cluster. Config handling, data, reward, ``fit`` and the checkpoint
code are ``main_ppo``'s own (``normalize_config`` → ``resolve_paths`` → ``validate_config`` → ``build_trainer``).
Exit status: 0 when done, ``128 + signal`` after a ``trainer.save_on_exit`` stop, 1 on an error.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:  # run as a script from a checkout: make ``verl`` importable
    sys.path.insert(0, str(REPO_ROOT))


def main(overrides: list[str]) -> None:
    from verl.single_controller.local import build_local_trainer
    from verl.trainer.main_ppo import setup_logging

    setup_logging()
    trainer = build_local_trainer(overrides, init_workers=False)
    try:
        trainer.init_workers()
        trainer.fit()
    finally:
        trainer.shutdown()


if __name__ == "__main__":
    main(sys.argv[1:])
