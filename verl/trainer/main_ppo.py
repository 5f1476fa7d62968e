"""Entry point: ``python -m verl.trainer.main_ppo key=value ...`` (Hydra over ``config/ppo_trainer.yaml``).

Accepts ToolRL's launch overrides verbatim. Steps: refuse keys the config does not define → normalise deprecated keys
→ resolve the data files (RLLA discovery when unset) → validate the config → check every data row → resolve the model
(presets are prepared once, on the driver) → start or join Ray → build datasets (prompt lengths checked), reward
managers and worker groups → ``RayPPOTrainer.fit()``. A user's mistake found by these checks (config, data, model path,
checkpoint) is printed as one ``error:`` line, exit status 2, without a traceback.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf, open_dict

from verl.trainer.config_errors import ConfigError
from verl.trainer.config_utils import normalize_config, validate_config, world_size, write_run_record
from verl.trainer.unsupported_config_checks import reward_sandbox, uses_reward_api

logger = logging.getLogger(__name__)


def setup_logging() -> None:
    """INFO-level logs with timestamps on stderr (the heartbeat and console metrics use them)."""
    logging.basicConfig(
        level=os.environ.get("VERL_LOG_LEVEL", "INFO"),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    for noisy in ("httpx", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def resolve_data_files(config: DictConfig) -> DictConfig:
    """Fill ``data.{train,val}_files`` from RLLA discovery when unset (``verl.utils.dataset.rlla_data``: ``DATA_DIR``,
    ``dataset/rlla_4k``, the shared reference folder); nothing to do in agent mode (``env.env_name``). With
    ``data.task`` the generated task's files instead (:func:`resolve_task`).

    With ``router.enable`` the router's ``*_router`` files are written next to the data once
    (``verl.router.preprocess``), and with ``router.irrelevance_fraction > 0`` the training file is
    ``train_router.parquet`` plus that many irrelevance rows (``verl.router.irrelevance.prepare_train_file``: written
    once, remade when its input changed); validation stays ``test_router.parquet``.

    Raises:
        ConfigError: ``router.irrelevance_fraction`` outside [0, 1] or a negative ``router.irrelevance_seed``; a
            fraction > 0 without ``router.enable`` or with ``data.train_files`` set (the rows are added to the
            discovered router file only).
        DataCheckError: no RLLA data found (every place looked at is named).
    """
    agent_mode = bool(config.env.env_name)
    fraction = float(config.router.irrelevance_fraction)
    if fraction > 0 and not config.router.enable:
        raise ConfigError(
            f"router.irrelevance_fraction={fraction:g} adds irrelevance rows to the router's training "
            f"file: it needs router.enable=true"
        )
    if not 0 <= fraction <= 1 or int(config.router.irrelevance_seed) < 0:
        raise ConfigError(
            f"router.irrelevance_fraction={config.router.irrelevance_fraction}, router.irrelevance_seed="
            f"{config.router.irrelevance_seed}: expected a fraction from 0 (no irrelevance rows) to 1 "
            f"and a seed >= 0"
        )
    if fraction > 0 and config.data.train_files:
        raise ConfigError(
            f"router.irrelevance_fraction={fraction:g} adds irrelevance rows to the discovered "
            f"train_router.parquet, but data.train_files={config.data.train_files} is set: make that "
            f"file's rows with `python -m verl.router.irrelevance --input FILE --output OUT --fraction "
            f"{fraction:g}` and pass OUT, with router.irrelevance_fraction=0"
        )
    if config.data.task_dir and not config.data.task:
        raise ConfigError(
            f"data.task_dir={config.data.task_dir} is where data.task is written, but data.task is null: set "
            f"data.task=route_qa, or drop data.task_dir"
        )
    if config.data.task and not agent_mode:
        return resolve_task(config)
    if agent_mode or (config.data.train_files and config.data.val_files):
        return config
    from verl.utils.dataset.rlla_data import resolve_rlla_data_dir

    from verl.trainer.preflight import DataCheckError

    try:
        data_dir = resolve_rlla_data_dir(os.environ.get("DATA_DIR"))
    except FileNotFoundError as err:  # every place looked at is named: a user's error, one line
        raise DataCheckError(f"data.train_files / data.val_files are null and no RLLA data was found: {err}") from None
    suffix, train_file = "", None
    if config.router.enable:  # weak labels and tool families for the router (written once, next to the data)
        from verl.router.preprocess import preprocess_dir

        if not ((data_dir / "train_router.parquet").is_file() and (data_dir / "test_router.parquet").is_file()):
            preprocess_dir(data_dir, tool_family_file=config.router.tool_family_file)
        suffix = "_router"
        if fraction > 0:
            from verl.router.irrelevance import prepare_train_file

            train_file = prepare_train_file(data_dir, fraction, int(config.router.irrelevance_seed))
    with open_dict(config):
        config.data.train_files = config.data.train_files or str(train_file or data_dir / f"train{suffix}.parquet")
        config.data.val_files = config.data.val_files or str(data_dir / f"test{suffix}.parquet")
    return config


def resolve_task(config: DictConfig) -> DictConfig:
    """``data.task``: write the generated task once (``verl.utils.dataset.route_qa.ensure_task``, seed 0, into
    ``data.task_dir`` or the cache) and point ``data.train_files`` / ``val_files`` and ``data.task_dir`` at it. The
    tool list (``actor_rollout_ref.rollout.multi_turn.tools``) is resolved here, so that a tool's kwargs may name
    ``${data.task_dir}``.

    Raises:
        ConfigError: a task other than ``route_qa``; ``data.train_files`` / ``val_files`` set beside it (the task
            would replace them); ``router.irrelevance_fraction > 0`` (irrelevance rows are RLLA's).
    """
    task = str(config.data.task)
    if task != "route_qa":
        raise ConfigError(f"data.task={task}: expected route_qa (docs/route_qa.md) or null (files or RLLA discovery)")
    if config.data.train_files or config.data.val_files:
        raise ConfigError(
            f"data.task={task} writes the training and validation files itself, but data.train_files="
            f"{config.data.train_files} / data.val_files={config.data.val_files} are set: leave them null, or "
            f"drop data.task to train on those files"
        )
    if float(config.router.irrelevance_fraction) > 0:
        raise ConfigError(
            f"router.irrelevance_fraction={config.router.irrelevance_fraction} adds RLLA irrelevance rows; "
            f"data.task={task} has its own direct questions: set it to 0"
        )
    from verl.utils.dataset.route_qa import ensure_task

    from omegaconf.errors import InterpolationResolutionError

    folder = ensure_task(config.data.task_dir or None)
    multi_turn = config.actor_rollout_ref.rollout.multi_turn
    with open_dict(config):
        config.data.task_dir = str(folder)
        config.data.train_files = str(folder / "train.parquet")
        config.data.val_files = str(folder / "val.parquet")
        try:
            multi_turn.tools = OmegaConf.to_container(multi_turn.tools, resolve=True)
        except InterpolationResolutionError as err:
            raise ConfigError(f"actor_rollout_ref.rollout.multi_turn.tools: {err}") from None
    return config


def resolve_models(config: DictConfig) -> DictConfig:
    """Turn ``actor_rollout_ref.model.path`` (and the critic's) into a local directory: a preset is prepared once
    here on the driver; a folder must hold a readable ``config.json``; a hub id is accepted only where the hub can be
    reached (``verl.utils.model_presets.prepare_model``, which raises ``ModelPathError`` naming the key). An SFT preset
    (``tiny-sft``, ``smollm2-135m-sft``, ``tiny-route-qa``) not built yet is built first when
    ``trainer.build_sft_preset`` is true (``verl.trainer.sft_presets.build_sft_preset``; ``tiny-route-qa``:
    ``verl.trainer.route_qa.warm_start``, minutes on a CPU; a built one must record this version's settings). The
    critic's ``tokenizer_path`` left at its default (the actor's) follows the actor's directory; one set is kept."""
    from verl.utils.model_presets import SFT_PRESETS, preset_dir, prepare_model

    with open_dict(config):
        actor_path = config.actor_rollout_ref.model.path
        paths = [actor_path] + ([config.critic.model.path] if config.critic.enable else [])
        for name in dict.fromkeys(str(p) for p in paths):
            if (
                config.trainer.build_sft_preset
                and name in SFT_PRESETS
                and not (preset_dir(name) / "config.json").is_file()
            ):
                from verl.trainer.config_utils import require_device
                from verl.trainer.sft_presets import build_sft_preset

                require_device(config)  # never minutes of SFT for a run that cannot place its models

                logger.info("model preset %s is not built yet: building it (trainer.build_sft_preset=true)", name)
                if name == "tiny-route-qa":
                    from verl.trainer.route_qa.warm_start import build_warm_start

                    build_warm_start(data_dir=config.data.task_dir)  # the run's task folder (resolve_task)
                else:
                    build_sft_preset(name)
            elif name == "tiny-route-qa" and (preset_dir(name) / "config.json").is_file():
                from verl.trainer.route_qa.warm_start import check_warm_start  # built by this version's settings

                check_warm_start(preset_dir(name))
        model_dir = prepare_model(actor_path, key="actor_rollout_ref.model.path")
        config.actor_rollout_ref.model.path = model_dir
        if config.critic.enable:
            config.critic.model.path = prepare_model(config.critic.model.path, key="critic.model.path")
            if config.critic.model.tokenizer_path in (None, actor_path, model_dir):
                config.critic.model.tokenizer_path = model_dir
    return config


def apply_reward_switches(config: DictConfig) -> list[str]:
    """Turn on ToolRL's reward switches listed in ``reward_model.switches`` (their environment variables set to
    ``"1"``, where the rewards and the Ray workers read them); a variable the user set wins, with a warning when it
    says otherwise. Returns the switches turned on here.

    Raises:
        ConfigError: a name that is not one of ToolRL's switches.
    """
    from verl.utils.reward_score.rlla import SWITCH_ENV_VARS

    known = set(SWITCH_ENV_VARS.values())
    turned_on = []
    for name in config.reward_model.switches:
        if name not in known:
            raise ConfigError(
                f"reward_model.switches: {name!r} is not a ToolRL reward switch; expected some of {sorted(known)}"
            )
        if os.environ.get(name, "") == "":
            os.environ[name] = "1"
            turned_on.append(name)
        elif os.environ[name] != "1":
            logger.warning(
                "reward_model.switches turns %s on, but the environment sets %s=%s: the variable wins",
                name,
                name,
                os.environ[name],
            )
    return turned_on


def resolve_paths(config: DictConfig) -> DictConfig:
    """``resolve_data_files`` then ``resolve_models``."""
    return resolve_models(resolve_data_files(config))


def prepare_config(config: DictConfig) -> DictConfig:
    """Everything checked before a model is built, cheapest first, so a typo fails in seconds: keys the config does
    not define (``check_known_keys``), the type of every value (``typed_config``: the returned config is a new,
    typed object — use it, not the argument), deprecated-key mapping (``normalize_config``), data discovery, batch
    arithmetic and names (``validate_config``), the keys this mode does not read and the ranges of those it does
    (``key_table.check_keys``: ``main_ppo``, or ``agent`` with ``env.env_name``), every data row (``preflight.check_data_files``), then the model
    paths (presets are built here, which can take minutes the first time). Before any data or model work, a
    checkpoint to resume that was trained from another model is refused (``checkpointing.refuse_other_model``), and
    the reward switches of ``reward_model.switches`` are turned on.

    Raises:
        ConfigError, DataCheckError, ModelPathError: the message names the key, file or row.
    """
    import copy

    from verl.trainer.config_keys import check_known_keys
    from verl.trainer.config_utils import default_config, typed_config
    from verl.trainer.key_table import check_keys
    from verl.trainer.preflight import check_data_files

    from verl.trainer.ppo.checkpointing import refuse_other_model

    check_known_keys(config)
    config = typed_config(config)
    as_given = copy.deepcopy(config)  # before normalize_config and data discovery fill derived values
    normalize_config(config)
    refuse_other_model(config)
    apply_reward_switches(config)
    resolve_data_files(config)
    validate_config(config)
    check_keys(as_given, default_config(), "agent" if config.env.env_name else "main_ppo")  # the key table
    check_data_files(config)
    resolve_models(config)
    return config


def load_custom_reward(config: DictConfig):
    """The reward-API function named by ``custom_reward_function`` (``docs/reward_api.md`` "Decorator"),
    or None for the built-in default path (RLLA via ``default_compute_score``, in process).

    - ``path`` set: ``name`` (default ``compute_score``) from that file: a ``@reward_function``, an upstream-style
      ``compute_score(data_source, solution_str, ground_truth, extra_info)`` (adapted), or a plain function taking
      ``(messages, ground_truth, **kwargs)``;
    - ``path`` unset and ``name`` a registered reward other than ``compute_score`` (e.g. ``rlla``): that reward.

    Raises:
        FileNotFoundError / AttributeError / TypeError: the file, the function or its signature is wrong (the message
            names the key). KeyError: ``name`` is not a registered reward (path unset).
    """
    from agent_system.reward import get_reward_function, load_reward_function

    spec_cfg = config.custom_reward_function
    if not uses_reward_api(config):
        return None
    name = spec_cfg.name or "compute_score"
    return load_reward_function(spec_cfg.path, name) if spec_cfg.path else get_reward_function(name)


def build_reward_runner(config: DictConfig, fn):
    """``agent_system.reward.make_runner`` for ``fn`` from ``reward.*``: ``sandbox`` (``none``/``process``; null:
    ``process`` for a function from ``custom_reward_function.path``, ``none`` for a registered built-in),
    ``num_workers``, ``timeout_s`` (null: the function's own ``timeout_s``, else 30 s), ``memory_mb``.

    Raises:
        ValueError: unknown ``reward.sandbox``; a function that cannot be loaded by a worker with ``process``.
    """
    from agent_system.reward import make_runner

    cfg = config.reward
    return make_runner(
        fn,
        sandbox=reward_sandbox(config),
        num_workers=int(cfg.num_workers),
        timeout_s=cfg.timeout_s,
        memory_mb=cfg.memory_mb,
    )


def build_reward_managers(config: DictConfig, tokenizer, compute_score=None):
    """Training and validation reward managers: the manager registered as ``reward_model.reward_manager`` (``naive``
    and ``rlla`` are both the built-in RLLA manager, scoring with ``compute_score``, default ``default_compute_score``),
    or, with ``custom_reward_function``, a ``RewardAPIManager`` pair sharing one runner (sandbox).

    Raises:
        ValueError: an unregistered ``reward_model.reward_manager`` (refused at load by ``validate_config`` too).
    """
    from agent_system.reward.manager import RewardAPIManager
    from verl.workers.reward_manager import get_reward_manager_cls

    kwargs = dict(
        tokenizer=tokenizer,
        decode=config.reward_model.decode,
        wrapper=config.reward_model.wrapper,
        reward_fn_key=config.data.reward_fn_key,
        tool_format=config.data.tool_format,
    )
    num_examine = int(config.reward_model.num_examine)
    fn = load_custom_reward(config)
    if fn is None:
        kwargs["compute_score"] = compute_score
        manager = get_reward_manager_cls(config.reward_model.reward_manager)
        return manager(num_examine=0, **kwargs), manager(num_examine=num_examine, **kwargs)
    if compute_score is not None:
        logger.warning("custom_reward_function: the reward receives responses with their RLVCR <level> tag")
    runner = build_reward_runner(config, fn)
    logger.info("reward: %r through the reward API, sandbox=%s", fn, type(runner).__name__)
    return (
        RewardAPIManager(runner=runner, num_examine=0, **kwargs),
        RewardAPIManager(runner=runner, num_examine=num_examine, **kwargs),
    )


def init_ray(config: DictConfig) -> None:
    """Join ``ray_init.address`` / ``RAY_ADDRESS`` when given (``auto`` joins the cluster made by ``ray start``), else
    start a fresh local instance with ``ray_init.num_cpus`` CPUs.

    The local start passes ``address="local"`` explicitly: without it Ray silently joins whatever cluster
    ``/tmp/ray/ray_current_cluster`` names, even a dead one, and then rejects ``num_cpus``.

    Ray >= 2.5x turns token authentication on by default once ``~/.ray/auth_token`` exists. A local instance is
    started with ``RAY_AUTH_MODE=disabled`` unless the user set the variable (the driver, the cluster and the workers
    must agree, so it is set in the driver's environment before ``ray.init``); a joined cluster keeps its own mode.
    A local instance starts no idle workers ahead of need (``enable_worker_prestart``)."""
    import ray

    if ray.is_initialized():
        return
    address = config.ray_init.address or os.environ.get("RAY_ADDRESS")
    if not address:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    env_vars = {"TOKENIZERS_PARALLELISM": "false"}
    for key in (
        "WITHLENGTH",
        "SCHEDULELENGTH",
        "CORRECTMAX1",
        "MAX1STEP30MAX3",
        "SCHEDULEREWARD",
        "REFINEDREWARD",
        "COARSEREWARD",
        "INTERMEDIATEREWARD",
        "EXPERIMENT_NAME",
        "TOOLRL_CACHE",
        "TOOLRL_SHARED",
        "RAY_AUTH_MODE",
    ):
        if key in os.environ:
            env_vars[key] = os.environ[key]
    kwargs = dict(runtime_env={"env_vars": env_vars}, include_dashboard=False, log_to_driver=True)
    if address:
        logger.info("joining Ray cluster at %s", address)
        ray.init(address=address, **kwargs)
    else:
        num_cpus = config.ray_init.num_cpus
        # no idle Python workers started ahead of need (Ray starts one per CPU by default, ~80 MB each; every
        # process of ours is an actor with its own worker)
        ray.init(
            address="local",
            num_cpus=num_cpus,
            _system_config={"enable_worker_prestart": False, "prestart_worker_first_driver": False},
            **kwargs,
        )


def build_trainer(config: DictConfig):
    """Everything ``fit()`` needs, from a normalised, validated config (also used by tests)."""
    from transformers import AutoTokenizer

    from verl.trainer.ppo.ray_resources import ResourcePoolManager, Role
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer
    from verl.trainer.preflight import check_prompt_lengths
    from verl.utils.dataset.rl_dataset import RLHFDataset
    from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker

    tokenizer = AutoTokenizer.from_pretrained(config.actor_rollout_ref.model.path)
    collate_fn = None
    if config.env.env_name:  # multi-turn: task seeds instead of prompts
        from agent_system.multi_turn_rollout.agent_rollout import EnvTaskDataset, task_collate_fn

        train_dataset = EnvTaskDataset(int(config.env.train_tasks), offset=int(config.env.seed))
        val_dataset = EnvTaskDataset(int(config.env.val_tasks), offset=int(config.env.val_seed_offset))
        collate_fn, val_reward_fn = task_collate_fn, None
        # rewards come from the environments, or from custom_reward_function scoring whole trajectories
        fn = load_custom_reward(config)
        reward_fn = build_reward_runner(config, fn) if fn is not None else None
        if fn is not None:
            logger.info("agent reward: %r through the reward API, sandbox=%s", fn, type(reward_fn).__name__)
    else:
        from rlvcr.rollout_phase import rlla_level_setup

        # RLVCR: level guide in the system prompt, level tag stripped before the reward; (None, None) otherwise
        template, compute_score = rlla_level_setup(config, tokenizer)
        data_config = {**OmegaConf.to_container(config.data, resolve=True), "chat_template_func": template}
        train_dataset = RLHFDataset(data_files=config.data.train_files, tokenizer=tokenizer, config=data_config)
        val_config = {**data_config, "max_samples": config.data.val_max_samples}
        val_dataset = RLHFDataset(data_files=config.data.val_files, tokenizer=tokenizer, config=val_config)
        check_prompt_lengths(config, {"data.train_files": train_dataset, "data.val_files": val_dataset})
        reward_fn, val_reward_fn = build_reward_managers(config, tokenizer, compute_score)
    mapping = {Role.ActorRolloutRef: "global_pool"}
    role_worker_mapping = {Role.ActorRolloutRef: ActorRolloutRefWorker}
    if config.critic.enable:
        mapping[Role.Critic] = "global_pool"
        role_worker_mapping[Role.Critic] = CriticWorker
    if config.trainer.single_process:  # the workers inside this process, no Ray
        from verl.single_controller.local import LocalResourcePoolManager, LocalWorkerGroup

        resource_pool_manager, worker_group_cls = LocalResourcePoolManager(mapping), LocalWorkerGroup
    else:
        pool_spec = {"global_pool": [max(1, int(config.trainer.n_gpus_per_node))] * int(config.trainer.nnodes)}
        resource_pool_manager = ResourcePoolManager(
            resource_pool_spec=pool_spec,
            mapping=mapping,
            use_gpu=config.trainer.device == "cuda",
            cpus_per_worker=float(config.trainer.cpus_per_worker),
        )
        worker_group_cls = None  # RayWorkerGroup
    return RayPPOTrainer(
        config=config,
        tokenizer=tokenizer,
        role_worker_mapping=role_worker_mapping,
        resource_pool_manager=resource_pool_manager,
        ray_worker_group_cls=worker_group_cls,
        reward_fn=reward_fn,
        val_reward_fn=val_reward_fn,
        train_dataset=train_dataset,
        val_dataset=val_dataset,
        collate_fn=collate_fn,
    )


def build_local_trainer(overrides: list[str], init_workers: bool = True):
    """A ``RayPPOTrainer`` built exactly as ``main_ppo`` builds it (``load_default_config`` → ``prepare_config`` →
    ``build_trainer``) but with its workers inside this process
    (:class:`LocalWorkerGroup`, one rank per role: ``trainer.single_process=true``), for benchmarks and tests that
    must not start Ray.

    Args:
        overrides: Hydra ``key=value`` overrides of ``ppo_trainer.yaml``.
        init_workers: build the workers (models, optimizers) right away.

    Raises:
        ConfigError: the config is invalid (the message names the key).
    """
    from verl.trainer.config_utils import load_default_config

    config = prepare_config(load_default_config([*overrides, "trainer.single_process=true"]))
    trainer = build_trainer(config)
    if init_workers:
        trainer.init_workers()
    return trainer


def run_ppo(config: DictConfig) -> "RayPPOTrainer":  # noqa: F821
    """Check and resolve the config (``prepare_config``), then train. Returns the trainer (its ``run_dir()`` holds
    metrics.jsonl).

    Ray is started (or joined, ``ray_init.address``) unless ``trainer.single_process`` puts the one worker per role
    inside this process (``verl.single_controller.local.LocalWorkerGroup``): same trainer, workers and results, without
    the Ray daemons and the worker processes' own copies of torch (about 1 GB of RSS on a 2-core CPU machine)."""
    from verl.utils.checkpoint_space import check_writable
    from verl.utils.run_lock import hold_folders

    after_fit = load_after_fit(config.trainer.after_fit)  # a bad reference fails now, before any preset is built
    if after_fit is not None and hasattr(after_fit, "check"):
        after_fit.check(config)  # what the hook needs of the run (ConfigError), before the training
    config = prepare_config(config)
    if writes_checkpoints(config):
        check_writable(config.trainer.default_local_dir)  # a read-only folder fails here, not at the first save
    logger.info(
        "device=%s workers=%d estimator=%s", config.trainer.device, world_size(config), config.algorithm.adv_estimator
    )
    # one run per experiment folder (a second one is refused here)
    with hold_folders(run_folders(config, checkpoints=writes_checkpoints(config))):
        if not config.trainer.single_process:
            init_ray(config)
        trainer = build_trainer(config)
        write_run_record(config, trainer.run_dir())
        try:
            trainer.init_workers()
            trainer.fit()
        finally:
            trainer.shutdown()
        if config.trainer.plot_on_finish:
            from verl.utils.plot_metrics import plot

            written = plot(Path(trainer.run_dir()) / "metrics.jsonl", Path(trainer.run_dir()) / "plots")
            logger.info("plots: %s", ", ".join(str(p) for p in written))
        if after_fit is not None:  # inside the folders' lock: it writes into the run folder
            logger.info("trainer.after_fit: %s", config.trainer.after_fit)
            after_fit(config, trainer)
    return trainer


def load_after_fit(ref: str | None):
    """The callable ``trainer.after_fit`` names (``package.module:function``, called as ``function(config, trainer)``
    once training has ended and the plots are written, inside the run folders' lock), or None when unset. A
    function with a ``check`` attribute has ``check(config)`` called before the config is prepared, to refuse a run
    it could not finish (raising ``ConfigError``).

    Raises:
        ConfigError: not of the form ``module:function``, a module that does not import, or no such function.
    """
    if not ref:
        return None
    import importlib

    module_name, sep, name = str(ref).partition(":")
    if not sep or not module_name or not name:
        raise ConfigError(f"trainer.after_fit={ref}: expected 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ConfigError(f"trainer.after_fit={ref}: module {module_name} does not import ({err})") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"trainer.after_fit={ref}: {module_name} has no function {name!r}")
    return fn


def writes_checkpoints(config: DictConfig) -> bool:
    """Whether the run saves checkpoints on its own schedule (``trainer.save_freq > 0`` or ``trainer.save_on_exit``);
    a run with neither leaves ``trainer.default_local_dir`` alone (a bad-step stop still saves into it)."""
    return int(config.trainer.save_freq or -1) > 0 or bool(config.trainer.save_on_exit)


def run_folders(config: DictConfig, checkpoints: bool = True) -> list[tuple[str, str]]:
    """The folders a run writes and owns (``verl.utils.run_lock``): the run folder of ``metrics.jsonl``
    (``trainer.run_dir``, default ``outputs/<project_name>/<experiment_name>``) and, with ``checkpoints``, the
    checkpoint folder first."""
    trainer = config.trainer
    run_dir = trainer.run_dir or os.path.join("outputs", trainer.project_name, trainer.experiment_name)
    folders = [("trainer.default_local_dir", str(trainer.default_local_dir))] if checkpoints else []
    return folders + [("trainer.run_dir", str(run_dir))]


def user_errors() -> tuple[type[Exception], ...]:
    """Exception types that report a user's mistake with a message naming the key, file or row: ``main`` prints them
    as one line (exit 2) instead of a traceback."""
    from verl.trainer.config_utils import ConfigError
    from verl.trainer.preflight import DataCheckError
    from verl.utils.checkpoint_manifest import CheckpointError
    from verl.utils.model_presets import ModelPathError
    from verl.utils.run_lock import FolderInUseError

    return ConfigError, DataCheckError, CheckpointError, ModelPathError, FolderInUseError


@hydra.main(config_path="config", config_name="ppo_trainer", version_base="1.3")
def main(config: DictConfig) -> None:
    setup_logging()
    try:
        run_ppo(config)
    except user_errors() as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


def cli(app=main, name: str = "main_ppo") -> None:
    """``python -m verl.trainer.<name> [recipe=<name>] [key=value ...]``: the command line goes through
    ``verl.trainer.launch.launch_overrides`` (recipe, hardware, launch variables), then to Hydra."""
    from verl.trainer.launch import LaunchError, launch_overrides

    setup_logging()
    try:
        sys.argv[1:] = launch_overrides(sys.argv[1:], app=name)
    except LaunchError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    app()


if __name__ == "__main__":
    cli()
