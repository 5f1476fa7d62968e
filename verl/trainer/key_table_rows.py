"""The rows of the key table (``verl/trainer/key_table.py`` says how to read them): every key of ``ppo_trainer.yaml``
(with ``async_trainer.yaml``'s ``async`` section) and of ``generation.yaml``, with the entry points that read it.

Readers: P main_ppo (single-turn), A agent mode (main_ppo with env.env_name), S main_async, G main_generation,
E main_eval. A key read by none is refused everywhere when set (upstream's keys of features this project does not
implement, kept so that upstream's launch lines fail with a reason instead of being ignored).
"""

TABLE = """
# tree: ppo_trainer
data.tokenizer | - | - | prompts are always tokenized with the actor's tokenizer (actor_rollout_ref.model.path): leave null
data.train_files | PS | - | agent mode draws its tasks from the environment (env.*); main_async: the rows of its rlla envs
data.val_files | PS | - | agent mode draws its tasks from the environment (env.*)
data.task | P | {route_qa} | agent mode draws its tasks from the environment (env.*); main_async: set data.train_files to the task's files
data.task_dir | P | - | agent mode draws its tasks from the environment (env.*); main_async: set data.train_files to the task's files
data.prompt_key | PS | - | agent mode draws its tasks from the environment (env.*); main_async: the validation prompts' column
data.reward_fn_key | PS | - | agent mode draws its tasks from the environment (env.*)
data.tool_format | PS | - | agent mode draws its tasks from the environment (env.*)
data.max_prompt_length | PAS | >= 1 | 
data.max_response_length | PAS | >= 1 | 
data.train_batch_size | PAS | >= 1 | main_async: problems per batch (async.batcher.max_groups), when set
data.val_batch_size | PAS | >= 1 | deprecated upstream: a warning, validation runs over the whole set
data.return_raw_input_ids | - | - | raw prompt ids are not returned by the dataset: set false
data.return_raw_chat | P | - | agent mode draws its tasks from the environment (env.*); main_async has no data loader: its env actors play the rows (async.envs.*)
data.truncation | PS | {error, left, right, middle} | agent mode draws its tasks from the environment (env.*)
data.filter_overlong_prompts | PS | - | agent mode draws its tasks from the environment (env.*)
data.shuffle | PAS | - | main_async: the row order of its rlla envs
data.seed | PAS | >= 0 | main_async: the row order of its rlla envs
data.dataloader_num_workers | PA | >= 0 | main_async has no data loader: its env actors play the rows (async.envs.*)
data.max_samples | PS | >= 1 or -1 | agent mode draws its tasks from the environment (env.*); main_async: the rows of its rlla envs
data.val_max_samples | PS | >= 1 or -1 | agent mode draws its tasks from the environment (env.*)
actor_rollout_ref.hybrid_engine | - | - | the actor and its rollout always share weights here: set true
actor_rollout_ref.model.path | PAS | - | 
actor_rollout_ref.model.external_lib | PAS | - | 
actor_rollout_ref.model.enable_gradient_checkpointing | PAS | - | 
actor_rollout_ref.model.use_remove_padding | PAS | - | 
actor_rollout_ref.model.use_shared_prompt | PAS | - | 
actor_rollout_ref.model.use_fused_kernels | PAS | - | 
actor_rollout_ref.model.trust_remote_code | PAS | - | 
actor_rollout_ref.model.lora_rank | PAS | >= 0 | 
actor_rollout_ref.model.lora_alpha | PAS | > 0 | 
actor_rollout_ref.model.target_modules | PAS | - | 
actor_rollout_ref.model.override_config | PAS | - | 
actor_rollout_ref.actor.strategy | PAS | {fsdp, fsdp2} | 
actor_rollout_ref.actor.ppo_mini_batch_size | PAS | >= 1 | 
actor_rollout_ref.actor.ppo_micro_batch_size | PAS | >= 1 | 
actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu | PAS | >= 1 | 
actor_rollout_ref.actor.use_dynamic_bsz | PAS | - | 
actor_rollout_ref.actor.ppo_max_token_len_per_gpu | PAS | >= 1 | 
actor_rollout_ref.actor.grad_clip | PAS | > 0 | 
actor_rollout_ref.actor.clip_ratio | PAS | > 0 | 
actor_rollout_ref.actor.clip_ratio_low | PAS | >= 0 | 
actor_rollout_ref.actor.clip_ratio_high | PAS | >= 0 | 
actor_rollout_ref.actor.clip_ratio_c | PAS | > 1 | 
actor_rollout_ref.actor.policy_loss.loss_mode | PAS | - | 
actor_rollout_ref.actor.loss_agg_mode | PAS | {token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm} | 
actor_rollout_ref.actor.mask_truncated | PS | - | agent mode trains on truncated turns; main_async: with rlla envs only
actor_rollout_ref.actor.entropy_coeff | PAS | >= 0 | 
actor_rollout_ref.actor.use_kl_loss | PAS | - | 
actor_rollout_ref.actor.kl_loss_coef | PAS | >= 0 | 
actor_rollout_ref.actor.kl_loss_type | PAS | - | 
actor_rollout_ref.actor.ppo_epochs | PAS | >= 1 | 
actor_rollout_ref.actor.shuffle | PAS | - | 
actor_rollout_ref.actor.ulysses_sequence_parallel_size | - | - | sequence parallelism is not implemented: set 1 (use_remove_padding / use_dynamic_bsz keep long sequences cheap)
actor_rollout_ref.actor.optim.lr | PAS | >= 0 | 
actor_rollout_ref.actor.optim.lr_warmup_steps | PAS | >= 0 or -1 | 
actor_rollout_ref.actor.optim.lr_warmup_steps_ratio | PAS | [0, 1] | 
actor_rollout_ref.actor.optim.min_lr_ratio | PAS | [0, 1] | 
actor_rollout_ref.actor.optim.warmup_style | PAS | {constant, cosine} | 
actor_rollout_ref.actor.optim.total_training_steps | - | - | the trainer sets it from trainer.total_training_steps / total_epochs
actor_rollout_ref.actor.optim.weight_decay | PAS | >= 0 | 
actor_rollout_ref.actor.optim.betas | PAS | - | 
actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params | - | - | FSDP2 shards every decoder layer (no size-based wrap policy): set 0
actor_rollout_ref.actor.fsdp_config.param_offload | PAS | - | 
actor_rollout_ref.actor.fsdp_config.grad_offload | PAS | - | removed upstream: a warning when true
actor_rollout_ref.actor.fsdp_config.optimizer_offload | PAS | - | 
actor_rollout_ref.actor.fsdp_config.fsdp_size | - | - | hybrid sharding is not implemented: set -1 (shard over all workers)
actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype | PAS | - | 
actor_rollout_ref.actor.fsdp_config.mixed_precision.reduce_dtype | PAS | - | 
actor_rollout_ref.actor.fsdp_config.mixed_precision.buffer_dtype | PS | - | not in agent mode
actor_rollout_ref.actor.checkpoint.save_contents | PAS | - | 
actor_rollout_ref.ref.fsdp_config.param_offload | PAS | - | 
actor_rollout_ref.ref.fsdp_config.wrap_policy.min_num_params | - | - | FSDP2 shards every decoder layer: set 0
actor_rollout_ref.ref.fsdp_config.fsdp_size | - | - | hybrid sharding is not implemented: set -1
actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype | PAS | - | 
actor_rollout_ref.ref.fsdp_config.mixed_precision.reduce_dtype | PAS | - | 
actor_rollout_ref.ref.fsdp_config.mixed_precision.buffer_dtype | PS | - | not in agent mode
actor_rollout_ref.ref.log_prob_micro_batch_size | PAS | >= 1 | 
actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu | PAS | >= 1 | 
actor_rollout_ref.ref.log_prob_use_dynamic_bsz | PAS | - | 
actor_rollout_ref.ref.log_prob_max_token_len_per_gpu | PAS | >= 1 | 
actor_rollout_ref.ref.ulysses_sequence_parallel_size | - | - | sequence parallelism is not implemented: set 1
actor_rollout_ref.rollout.name | PA | {hf, vllm} | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.mode | - | - | the trainer's rollout is synchronous; the asynchronous mode is its own entry point, python -m verl.trainer.main_async (docs/async.md): set sync
actor_rollout_ref.rollout.temperature | PAS | >= 0 | 
actor_rollout_ref.rollout.top_k | PA | >= 0 or -1 | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.top_p | PA | (0, 1] | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.prompt_length | PA | >= 1 | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.response_length | PA | >= 1 | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.dtype | PA | - | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.gpu_memory_utilization | PA | (0, 1] | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.ignore_eos | PA | - | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.enforce_eager | PA | - | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.free_cache_engine | PA | - | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.load_format | PA | - | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.tensor_model_parallel_size | PA | >= 1 | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.max_num_batched_tokens | PA | >= 1 | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.max_num_seqs | PA | >= 1 | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.log_prob_micro_batch_size | PAS | >= 1 | 
actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu | PAS | >= 1 | 
actor_rollout_ref.rollout.log_prob_use_dynamic_bsz | PAS | - | 
actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu | PAS | >= 1 | 
actor_rollout_ref.rollout.micro_batch_size | PA | >= 1 | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.cache_implementation | PA | - | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.calculate_log_probs | PA | - | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.do_sample | PA | - | main_async generates on its inference servers (async.inference.*)
actor_rollout_ref.rollout.n | PAS | >= 1 | 
actor_rollout_ref.rollout.val_kwargs.do_sample | PAS | - | 
actor_rollout_ref.rollout.val_kwargs.temperature | PAS | >= 0 | 
actor_rollout_ref.rollout.val_kwargs.top_k | PA | >= 0 or -1 | main_async validates on its inference servers, which sample without top-k / top-p
actor_rollout_ref.rollout.val_kwargs.top_p | PA | (0, 1] | main_async validates on its inference servers, which sample without top-k / top-p
actor_rollout_ref.rollout.val_kwargs.n | PS | >= 1 | agent mode validates one episode per task
actor_rollout_ref.rollout.multi_turn.enable | P | - | agent mode plays its environments' own turns (env.*); main_async: an rlla env's async.envs.<name>.tools
actor_rollout_ref.rollout.multi_turn.max_assistant_turns | P | >= 1 | agent mode plays its environments' own turns (env.*); main_async: an rlla env's async.envs.<name>.tools
actor_rollout_ref.rollout.multi_turn.max_tokens_per_turn | P | >= 1 | agent mode plays its environments' own turns (env.*); main_async: an rlla env's async.envs.<name>.tools
actor_rollout_ref.rollout.multi_turn.max_tool_response_length | P | >= 1 | agent mode plays its environments' own turns (env.*); main_async: an rlla env's async.envs.<name>.tools
actor_rollout_ref.rollout.multi_turn.tools | P | - | agent mode plays its environments' own turns (env.*); main_async: an rlla env's async.envs.<name>.tools
actor_rollout_ref.rollout.multi_turn.sandbox | P | {process, none} | agent mode plays its environments' own turns (env.*); main_async: an rlla env's async.envs.<name>.tools
actor_rollout_ref.rollout.multi_turn.num_workers | P | >= 1 | agent mode plays its environments' own turns (env.*); main_async: an rlla env's async.envs.<name>.tools
actor_rollout_ref.rollout.multi_turn.timeout_s | P | > 0 | agent mode plays its environments' own turns (env.*); main_async: an rlla env's async.envs.<name>.tools
actor_rollout_ref.rollout.multi_turn.memory_mb | P | >= 1 | agent mode plays its environments' own turns (env.*); main_async: an rlla env's async.envs.<name>.tools
actor_rollout_ref.rollout.engine_kwargs | PA | - | main_async generates on its inference servers (async.inference.*)
critic.enable | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.strategy | PA | {fsdp, fsdp2} | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.optim.lr | PA | >= 0 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.optim.lr_warmup_steps | PA | >= 0 or -1 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.optim.lr_warmup_steps_ratio | PA | [0, 1] | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.optim.min_lr_ratio | PA | [0, 1] | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.optim.warmup_style | PA | {constant, cosine} | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.optim.total_training_steps | - | - | the trainer sets it from trainer.total_training_steps / total_epochs
critic.optim.weight_decay | PA | >= 0 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.optim.betas | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.model.path | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.model.tokenizer_path | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.model.external_lib | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.model.enable_gradient_checkpointing | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.model.use_remove_padding | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.model.trust_remote_code | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.model.fsdp_config.param_offload | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.model.fsdp_config.grad_offload | PA | - | removed upstream: a warning when true
critic.model.fsdp_config.optimizer_offload | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.model.fsdp_config.wrap_policy.min_num_params | - | - | FSDP2 shards every decoder layer: set 0
critic.model.fsdp_config.fsdp_size | - | - | hybrid sharding is not implemented: set -1
critic.model.fsdp_config.mixed_precision.param_dtype | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.model.fsdp_config.mixed_precision.reduce_dtype | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.model.fsdp_config.mixed_precision.buffer_dtype | P | - | not in agent mode; main_async has no critic
critic.model.override_config | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.ppo_mini_batch_size | PA | >= 1 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.ppo_micro_batch_size | PA | >= 1 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.ppo_micro_batch_size_per_gpu | PA | >= 1 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.forward_micro_batch_size | PA | >= 1 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.forward_micro_batch_size_per_gpu | PA | >= 1 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.use_dynamic_bsz | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.ppo_max_token_len_per_gpu | PA | >= 1 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.forward_max_token_len_per_gpu | PA | >= 1 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.ulysses_sequence_parallel_size | - | - | sequence parallelism is not implemented: set 1
critic.ppo_epochs | PA | >= 1 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.shuffle | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.grad_clip | PA | > 0 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.cliprange_value | PA | > 0 | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.loss_agg_mode | PA | {token-mean, seq-mean-token-sum, seq-mean-token-mean, seq-mean-token-sum-norm} | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
critic.checkpoint.save_contents | PA | - | main_async has no critic: its estimators are the outcome ones (grpo, rloo, reinforce_plus_plus, ...)
reward_model.enable | - | - | model-based rewards are not implemented: score with a rule reward (custom_reward_function.path)
reward_model.strategy | - | - | upstream's model-based reward: not implemented (reward_model.enable is refused)
reward_model.reward_manager | PS | - | agent mode scores with its environments or custom_reward_function
reward_model.decode | PS | {response, prompt+response} | agent mode scores with its environments or custom_reward_function
reward_model.wrapper | PS | {auto, qwen, llama, none} | agent mode scores with its environments or custom_reward_function
reward_model.num_examine | PS | >= 0 | agent mode scores with its environments or custom_reward_function
reward_model.switches | PAS | - | 
reward_model.overlong_buffer.enable | PS | - | agent mode scores with its environments or custom_reward_function; main_async: with rlla envs only, L_max = async.inference.max_tokens
reward_model.overlong_buffer.len | PS | >= 0 | agent mode scores with its environments or custom_reward_function; main_async: with rlla envs only, L_max = async.inference.max_tokens
reward_model.overlong_buffer.penalty_factor | PS | >= 0 | agent mode scores with its environments or custom_reward_function; main_async: with rlla envs only, L_max = async.inference.max_tokens
reward_model.micro_batch_size | - | - | upstream's model-based reward: not implemented
reward_model.max_length | - | - | upstream's model-based reward: not implemented
reward_model.ulysses_sequence_parallel_size | - | - | upstream's model-based reward: not implemented
reward_model.use_dynamic_bsz | - | - | upstream's model-based reward: not implemented
reward_model.forward_max_token_len_per_gpu | - | - | upstream's model-based reward: not implemented
reward_model.model.input_tokenizer | - | - | upstream's model-based reward: not implemented
reward_model.model.path | - | - | upstream's model-based reward: not implemented
reward_model.model.external_lib | - | - | upstream's model-based reward: not implemented
reward_model.model.use_remove_padding | - | - | upstream's model-based reward: not implemented
reward_model.model.fsdp_config.min_num_params | - | - | upstream's model-based reward: not implemented
reward_model.model.fsdp_config.param_offload | - | - | upstream's model-based reward: not implemented
custom_reward_function.path | PAS | - | main_async: its rlla envs and validation (a text_env is refused with it)
custom_reward_function.name | PAS | - | main_async: its rlla envs and validation (a text_env is refused with it)
reward.sandbox | PAS | {none, process} | 
reward.num_workers | PAS | >= 1 | 
reward.timeout_s | PAS | > 0 | 
reward.memory_mb | PAS | >= 0 | 
algorithm.gamma | PAS | [0, 1] | 
algorithm.lam | PAS | [0, 1] | 
algorithm.adv_estimator | PAS | - | 
algorithm.norm_adv_by_std_in_grpo | PAS | - | 
algorithm.use_kl_in_reward | PAS | - | 
algorithm.rollout_correction.rollout_is | PAS | - | 
algorithm.rollout_correction.rollout_is_threshold | PAS | > 0 | 
algorithm.rollout_correction.rollout_rs | PAS | - | 
algorithm.rollout_correction.rollout_rs_threshold | PAS | > 0 | 
algorithm.rollout_correction.rollout_rs_threshold_lower | PAS | >= 0 | 
algorithm.filter_groups.enable | PS | - | agent mode keeps every group; main_async: with rlla envs only, on each group as it arrives
algorithm.filter_groups.metric | PS | {seq_reward, score, format, correctness} | agent mode keeps every group; main_async: with rlla envs only, on each group as it arrives
algorithm.filter_groups.max_num_gen_batches | PS | >= 0 | agent mode keeps every group; main_async: with rlla envs only, on each group as it arrives
algorithm.kl_penalty | PAS | - | 
algorithm.kl_ctrl.type | PAS | - | 
algorithm.kl_ctrl.kl_coef | PAS | >= 0 | 
algorithm.kl_ctrl.horizon | PAS | >= 1 | 
algorithm.kl_ctrl.target_kl | PAS | > 0 | 
algorithm.gigpo.step_advantage_w | A | >= 0 | GiGPO groups agent steps: agent mode only (single-turn rows have no steps)
algorithm.gigpo.mode | A | - | GiGPO groups agent steps: agent mode only (single-turn rows have no steps)
algorithm.gigpo.epsilon | A | > 0 | GiGPO groups agent steps: agent mode only (single-turn rows have no steps)
algorithm.gigpo.invalid_action_penalty | A | >= 0 | GiGPO groups agent steps: agent mode only (single-turn rows have no steps)
algorithm.gigpo.anchor_similarity | A | [0, 1] | GiGPO groups agent steps: agent mode only (single-turn rows have no steps)
algorithm.gigpo.default_step_reward | A | finite | GiGPO groups agent steps: agent mode only (single-turn rows have no steps)
algorithm.rlvcr.enable | PA | - | main_async: RLVCR reads per-level fields of the synchronous rollout
algorithm.rlvcr.step_advantage_w | PA | >= 0 | main_async: RLVCR reads per-level fields of the synchronous rollout
algorithm.rlvcr.thinking_diversity_w | PA | >= 0 | main_async: RLVCR reads per-level fields of the synchronous rollout
algorithm.rlvcr.mode | PA | - | main_async: RLVCR reads per-level fields of the synchronous rollout
algorithm.rlvcr.thinking_cost_w | PA | >= 0 | main_async: RLVCR reads per-level fields of the synchronous rollout
algorithm.rlvcr.cost_max | PA | >= 1 | main_async: RLVCR reads per-level fields of the synchronous rollout
algorithm.rlvcr.num_levels | PA | >= 1 | main_async: RLVCR reads per-level fields of the synchronous rollout
algorithm.rlvcr.action_tags | PA | - | main_async: RLVCR reads per-level fields of the synchronous rollout
algorithm.rlvcr.alt_temperature | PA | >= 0 | main_async: RLVCR reads per-level fields of the synchronous rollout
algorithm.rlvcr.alt_top_p | PA | (0, 1] | main_async: RLVCR reads per-level fields of the synchronous rollout
algorithm.rlvcr.alt_max_think_tokens | PA | >= 1 | main_async: RLVCR reads per-level fields of the synchronous rollout
algorithm.rlvcr.only_positive_episodes | PA | - | main_async: RLVCR reads per-level fields of the synchronous rollout
algorithm.rlvcr.epsilon | PA | > 0 | main_async: RLVCR reads per-level fields of the synchronous rollout
router.enable | P | - | the router rewrites single-turn prompts before a synchronous generation
router.head | P | - | the router rewrites single-turn prompts before a synchronous generation
router.pooling | P | - | the router rewrites single-turn prompts before a synchronous generation
router.input_norm | P | - | the router rewrites single-turn prompts before a synchronous generation
router.detach_backbone | - | - | the router head has its own optimizer over the head only, so a gradient into the LM would be dropped: set true
router.greedy_eval | P | - | the router rewrites single-turn prompts before a synchronous generation
router.sample_per_rollout | - | - | only an independent route per copy of a prompt is implemented: set true (or rollout.n=1)
router.route_sampling | P | - | the router rewrites single-turn prompts before a synchronous generation
router.route_adv_norm | P | - | the router rewrites single-turn prompts before a synchronous generation
router.route_pg | P | - | the router rewrites single-turn prompts before a synchronous generation
router.loss_mode | P | - | the router rewrites single-turn prompts before a synchronous generation
router.value_temperature | P | > 0 | the router rewrites single-turn prompts before a synchronous generation
router.value_baseline_decay | P | [0, 1) | the router rewrites single-turn prompts before a synchronous generation
router.value_fit | P | - | the router rewrites single-turn prompts before a synchronous generation
router.value_ridge_alpha | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.filter_tools | P | - | the router rewrites single-turn prompts before a synchronous generation
router.answer_forbids_tool_calls | P | - | the router rewrites single-turn prompts before a synchronous generation
router.other_as | P | - | the router rewrites single-turn prompts before a synchronous generation
router.tool_family_file | P | - | the router rewrites single-turn prompts before a synchronous generation
router.irrelevance_fraction | P | [0, 1] | the router rewrites single-turn prompts before a synchronous generation
router.irrelevance_seed | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.budget_B | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.lambda_init | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.dual_lr | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.lambda_max | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.dual_update_freq | P | >= 1 | the router rewrites single-turn prompts before a synchronous generation
router.dual_kp | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.cost_weights.any_tool | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.cost_weights.search | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.cost_weights.calculate | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.cost_weights.per_call | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.cost_weights.obs_tokens | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.cost_weights.seconds | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.entropy_coeff | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.sup_coeff | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.grad_clip | P | > 0 | the router rewrites single-turn prompts before a synchronous generation
router.micro_batch_size | P | >= 1 | the router rewrites single-turn prompts before a synchronous generation
router.actor_reward | P | - | the router rewrites single-turn prompts before a synchronous generation
router.optim.lr | P | >= 0 | the router rewrites single-turn prompts before a synchronous generation
router.optim.shared | P | - | the router rewrites single-turn prompts before a synchronous generation
env.env_name | PA | - | 
env.seed | A | >= 0 | agent mode's environments and episodes
env.train_tasks | A | >= 1 | agent mode's environments and episodes
env.val_tasks | A | >= 1 | agent mode's environments and episodes
env.val_seed_offset | A | >= 0 | agent mode's environments and episodes
env.max_steps | A | >= 1 | agent mode's environments and episodes
env.history_length | A | >= 0 | agent mode's environments and episodes
env.max_prompt_length | A | >= 1 | agent mode's environments and episodes
env.action_tag | A | - | agent mode: env.env_name in {line_world, sokoban, textworld} (rlla_multiturn uses the raw output as the action)
env.num_workers | A | >= 1 | agent mode's environments and episodes
env.use_ray_workers | A | - | agent mode's environments and episodes
env.reward_mode | A | - | agent mode's environments and episodes
env.rollout.n | - | - | agent mode's environments
env.line_world.length | A | >= 1 | agent mode with env.env_name=line_world
env.sokoban.dim_room | A | - | agent mode with env.env_name=sokoban
env.sokoban.num_boxes | A | >= 1 | agent mode with env.env_name=sokoban
env.sokoban.max_steps | A | >= 1 | agent mode with env.env_name=sokoban
env.textworld.challenge | A | - | agent mode with env.env_name=textworld
env.textworld.level | A | >= 1 | agent mode with env.env_name=textworld
env.textworld.games_dir | A | - | agent mode with env.env_name=textworld
env.textworld.max_steps | A | >= 1 | agent mode with env.env_name=textworld
env.textworld.settings | A | - | agent mode's environments and episodes
env.rlla_multiturn.split | A | - | agent mode with env.env_name=rlla_multiturn
env.rlla_multiturn.data_dir | A | - | agent mode with env.env_name=rlla_multiturn
trainer.device | PAS | {cpu, cuda} | 
trainer.balance_batch | PA | - | main_async runs its own schedule (async.*) and does not read it
trainer.total_epochs | PA | >= 1 | main_async runs its own schedule (async.*) and does not read it
trainer.total_training_steps | PAS | >= 1 | 
trainer.project_name | PAS | - | 
trainer.experiment_name | PAS | - | 
trainer.logger | PAS | - | 
trainer.log_mfu | PA | - | main_async runs its own schedule (async.*) and does not read it
trainer.peak_flops_per_s | PA | > 0 | main_async runs its own schedule (async.*) and does not read it
trainer.log_val_generations | P | >= 0 | agent mode does not write it; main_async runs its own schedule (async.*) and does not read it
trainer.rollout_data_dir | P | - | agent mode does not write it; main_async runs its own schedule (async.*) and does not read it
trainer.validation_data_dir | PS | - | agent mode does not write it
trainer.nnodes | PA | >= 1 | main_async runs its own schedule (async.*) and does not read it
trainer.n_gpus_per_node | PA | >= 0 | main_async runs its own schedule (async.*) and does not read it
trainer.cpus_per_worker | PA | > 0 | main_async runs its own schedule (async.*) and does not read it
trainer.cpu_threads | PA | >= 1 | main_async runs its own schedule (async.*) and does not read it
trainer.single_process | PA | - | main_async runs its own schedule (async.*) and does not read it
trainer.save_freq | PAS | >= -1 | 
trainer.save_on_exit | PA | - | main_async runs its own schedule (async.*) and does not read it
trainer.test_freq | PAS | >= -1 | 
trainer.critic_warmup | PA | >= 0 | main_async runs its own schedule (async.*) and does not read it
trainer.max_consecutive_bad_steps | PA | >= 1 | main_async runs its own schedule (async.*) and does not read it
trainer.max_invalid_frac | PA | [0, 1] | main_async runs its own schedule (async.*) and does not read it
trainer.warn_zero_std_frac | PA | [0, 1] | main_async runs its own schedule (async.*) and does not read it
trainer.val_before_train | PAS | - | 
trainer.val_only | PA | - | main_async runs its own schedule (async.*) and does not read it
trainer.default_hdfs_dir | - | - | HDFS checkpoints are not implemented: leave null (trainer.default_local_dir holds them)
trainer.default_local_dir | PAS | - | 
trainer.run_dir | PAS | - | 
trainer.resume_mode | PA | {auto, disable, resume_path} | main_async runs its own schedule (async.*) and does not read it
trainer.resume_from_path | PA | - | main_async runs its own schedule (async.*) and does not read it
trainer.del_local_ckpt_after_load | - | - | checkpoints are never deleted after a resume: set false (trainer.max_actor_ckpt_to_keep rotates them)
trainer.max_actor_ckpt_to_keep | PA | >= 1 | main_async runs its own schedule (async.*) and does not read it
trainer.max_critic_ckpt_to_keep | PA | >= 1 | main_async runs its own schedule (async.*) and does not read it
trainer.resume_allow_changes | PA | - | main_async runs its own schedule (async.*) and does not read it
trainer.seed | PAS | >= 0 | 
trainer.deterministic | PA | - | main_async runs its own schedule (async.*) and does not read it
trainer.build_sft_preset | PAS | - | 
trainer.plot_on_finish | PA | - | main_async runs its own schedule (async.*) and does not read it
trainer.after_fit | PA | - | main_async runs its own schedule (async.*) and does not read it
ray_init.address | PAS | - | 
ray_init.num_cpus | PAS | >= 1 | 
async.inference.backend | S | - | 
async.inference.host | S | - | 
async.inference.num_servers | S | >= 1 | 
async.inference.num_threads | S | >= 1 | 
async.inference.num_gpus | S | >= 0 | 
async.inference.dtype | S | - | 
async.inference.vllm.max_model_len | S | >= 1 | 
async.inference.vllm.engine_kwargs | S | - | extra vllm.LLM arguments (backend=vllm)
async.inference.max_tokens | S | >= 1 | 
async.learner_threads | S | >= 1 | 
async.envs | S | - | env type name -> settings (kind, env, env_kwargs, replicas, fraction, group_size, max_turns, seed, data_file, max_rows)
async.replay.max_age | S | >= 0 | 
async.replay.min_group_size | S | >= 1 | 
async.replay.log_dir | S | - | 
async.batcher.total_token_budget | S | >= 1 | 
async.batcher.max_seq_len | S | >= 1 | 
async.batcher.spillover | S | - | 
async.batcher.order | S | - | 
async.batcher.max_groups | S | >= 1 | 
async.max_buffer_rollouts | S | >= 1 | 
async.broadcast_timeout_s | S | > 0 | 
async.max_restarts | S | >= 0 | 
# tree: generation
trainer.device | GE | {cpu, cuda} | null: cuda when available
data.path | G | - | the prompts; null: the format's default file (refused with data.format=bfcl)
data.format | GE | {auto, rlla, api_bank, bfcl} | bfcl also makes main_eval score with BFCL's checker
data.categories | G | - | data.format=bfcl only
data.prompt_key | G | - | the chat column of the parquet
data.n_samples | G | >= 1 | > 1 needs rollout.do_sample
data.output_path | GE | - | the JSONL written, then scored
data.batch_size | G | >= 1 | prompts per generate call
data.max_samples | G | >= 1 or -1 | -1: every row
data.truncation | G | {error, left, right, middle} | prompts longer than rollout.prompt_length
data.filter_overlong_prompts | G | - | drop such rows instead
data.prompt_tail_chars | G | >= 0 | 0: the whole last message in the JSONL
model.path | G | - | a preset, a local HF directory or a hub id
model.trust_remote_code | G | - | passed to transformers
model.override_config | G | - | HF config fields of the model
rollout.name | G | {hf} | HF generate is the only engine here
rollout.temperature | G | >= 0 | used only with rollout.do_sample
rollout.top_k | G | >= 1 or -1 | -1: off
rollout.top_p | G | (0, 1] | nucleus sampling
rollout.do_sample | G | - | false: greedy
rollout.prompt_length | G | >= 1 | longest prompt accepted, in tokens
rollout.response_length | G | >= 1 | new tokens at most
rollout.micro_batch_size | G | >= 1 | null: a whole data.batch_size batch at once
rollout.dtype | G | - | compute dtype on CUDA
rollout.seed | G | >= 0 | torch seed for sampling
rollout.multi_turn.enable | G | - | the executing tool loop, calls in ToolRL's format
rollout.multi_turn.max_assistant_turns | G | >= 1 | assistant turns per sample
rollout.multi_turn.max_tokens_per_turn | G | >= 1 | null: rollout.response_length
rollout.multi_turn.max_tool_response_length | G | >= 1 | observation tokens at most
rollout.multi_turn.tools | G | - | tool references
rollout.multi_turn.sandbox | G | {process, none} | where the calls run
rollout.multi_turn.num_workers | G | >= 1 | sandbox processes
rollout.multi_turn.timeout_s | G | > 0 | seconds a call may take
rollout.multi_turn.memory_mb | G | >= 1 | MiB a sandboxed call may allocate
eval.enable | G | - | score the generations with main_eval
eval.dataset | E | {auto, rlla, api_bank, bfcl} | main_eval's --dataset
eval.output_path | E | - | main_eval's --output; null: next to data.output_path
"""
