"""verl.utils.resume_precheck: a checkpoint of another model is refused before any SFT preset is built."""
import json

import pytest

from verl.utils import checkpoint_manifest as cm
from verl.utils import resume_precheck as rp
from verl.utils.model_presets import ModelPathError, prepare_model, preset_dir, resolve_model_path


def _checkpoint(root, step, model_path, with_key=True):
    """A minimal valid checkpoint (``global_step_<step>``) whose manifest records ``model_path``."""
    step_dir = root / f"global_step_{step}"
    step_dir.mkdir(parents=True)
    (step_dir / "data.pt").write_bytes(b"state")
    config = {"actor_rollout_ref": {"model": {"path": model_path}}}
    cm.write_manifest(step_dir, step=step, epoch=0, config=config, world_size=1, version="test")
    if not with_key:
        manifest = json.loads((step_dir / cm.MANIFEST).read_text())
        del manifest["resume_keys"][rp.MODEL_KEY]
        (step_dir / cm.MANIFEST).write_text(json.dumps(manifest))
    return step_dir


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLRL_CACHE", str(tmp_path / "cache"))


def test_resolve_model_path_is_what_prepare_model_returns_without_building(tmp_path, monkeypatch):
    """The pre-check compares the path ``resolve_model_path`` gives, the one function ``prepare_model`` resolves by."""
    assert str(resolve_model_path("smollm2-135m-sft")) == str(tmp_path / "cache" / "models" / "smollm2-135m-sft")
    assert resolve_model_path("smollm2-135m-sft") == preset_dir("smollm2-135m-sft")
    assert not (tmp_path / "cache").exists()  # nothing built
    assert resolve_model_path("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"
    home = tmp_path / "home"
    folder = home / "my_model"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (home / "weights.bin").write_bytes(b"")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(home)
    # the string a checkpoint records: absolute forms and ~ give the folder, relative forms stay relative
    expected = {str(folder): str(folder), str(folder) + "/": str(folder), "~/my_model": str(folder),
                "my_model": "my_model", "./my_model/": "my_model"}
    for given, recorded in expected.items():
        assert str(resolve_model_path(given)) == recorded == prepare_model(given), given
    # the values prepare_model refuses as paths to no folder resolve to None, and the pre-check leaves them to it
    run = tmp_path / "run"
    _checkpoint(run, 10, str(preset_dir("tiny-sft")))
    assert rp.model_path_conflict(run, "my_model") is not None  # a folder: compared, and refused
    for given in ("./missing", "~/missing", "/no/such/folder", "weights.bin", "a/b/c"):
        assert resolve_model_path(given) is None, given
        with pytest.raises(ModelPathError):
            prepare_model(given)
        assert rp.model_path_conflict(run, given) is None, given
    # a folder prepare_model refuses for its config.json is left to prepare_model's own message too
    (home / "no_config").mkdir()
    with pytest.raises(ModelPathError):
        prepare_model("no_config")
    assert rp.model_path_conflict(run, "no_config") is None


def test_another_model_in_the_folder_is_refused_with_both_paths_and_the_ways_out(tmp_path, capsys):
    root = tmp_path / "checkpoints" / "router_grpo" / "baseline_router"
    _checkpoint(root, 10, str(preset_dir("tiny-sft")))
    newest = _checkpoint(root, 20, str(preset_dir("tiny-sft")))
    assert rp.main(["--checkpoint_dir", str(root), "--model", "smollm2-135m-sft"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(newest) in err
    assert repr(str(preset_dir("tiny-sft"))) in err and repr(str(preset_dir("smollm2-135m-sft"))) in err
    assert "another EXPERIMENT_NAME" in err and "resume_mode" not in err  # disable would leave the other run newest
    assert not (tmp_path / "cache").exists()


def test_the_same_model_an_empty_folder_and_an_older_manifest_pass(tmp_path):
    root = tmp_path / "run"
    assert rp.main(["--checkpoint_dir", str(root), "--model", "tiny-sft"]) == 0  # no folder at all
    _checkpoint(root, 10, str(preset_dir("tiny-sft")))
    assert rp.main(["--checkpoint_dir", str(root), "--model", "tiny-sft"]) == 0
    old = tmp_path / "old"
    _checkpoint(old, 5, "ignored", with_key=False)  # written before the key existed: the trainer does not compare it
    assert rp.model_path_conflict(old, "tiny-sft") is None


def test_only_the_checkpoint_the_trainer_would_resume_counts(tmp_path):
    root = tmp_path / "run"
    _checkpoint(root, 10, str(preset_dir("smollm2-135m-sft")))
    broken = _checkpoint(root, 20, str(preset_dir("tiny-sft")))
    (broken / "data.pt").write_bytes(b"truncated state")  # another size: resume skips it
    assert rp.model_path_conflict(root, "smollm2-135m-sft") is None
    assert "global_step_10" in rp.model_path_conflict(root, "tiny-sft")
    damaged = _checkpoint(root, 30, str(preset_dir("tiny-sft")))
    (damaged / "data.pt").write_bytes(b"STATE")  # same size, another SHA-256: resume skips it too
    assert rp.model_path_conflict(root, "smollm2-135m-sft") is None


def test_a_path_to_no_folder_is_left_to_the_trainer(tmp_path):
    root = tmp_path / "run"
    _checkpoint(root, 10, str(preset_dir("tiny-sft")))
    assert rp.model_path_conflict(root, str(tmp_path / "missing")) is None  # prepare_model names that error
    assert rp.model_path_conflict(root, "org/some-hub-id") is not None


@pytest.mark.parametrize("override", [
    "trainer.resume_mode=disable", "trainer.resume_allow_changes=[actor_rollout_ref.model.path]",
    "trainer.default_local_dir=elsewhere", "trainer.experiment_name=other", "++trainer.project_name=p",
    "+trainer.resume_from_path=x/global_step_1", "actor_rollout_ref.model.path=tiny-sft",
    "hydra.job.chdir=true", "--config-name=other", "-cn", "trainer={}", "~trainer.resume_mode",
])
def test_an_override_that_could_change_the_outcome_makes_it_stand_aside(tmp_path, capsys, override):
    root = tmp_path / "run"
    _checkpoint(root, 10, str(preset_dir("tiny-sft")))
    args = ["--checkpoint_dir", str(root), "--model", "smollm2-135m-sft", "--"]
    assert rp.main(args + ["trainer.total_training_steps=3"]) == 2  # an unrelated override: still checked
    assert rp.main(args + ["trainer.total_training_steps=3", override]) == 0
    assert capsys.readouterr().err.endswith(f"resume pre-check: {override!r} can change what the trainer resumes; "
                                            "the trainer checks it\n")
