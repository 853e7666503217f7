#include "engine/parallel_plan.h"

#include <fstream>
#include <sstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace strata::engine {
namespace {

using ::testing::HasSubstr;

// A small config with every part the plan counts: 3 KDA layers (full-rank gate) and 1 MLA layer
// (q-LoRA, output gate), a dense first layer, LatentMoE with a shared expert, AttnRes, untied
// head. d = 64, V = 1000; KDA H = 4, D = 16, K = 4 (P = 64); MLA H = 4, r_q = 32, r_kv = 32,
// dn = dr = dv = 16 (latent row 48); E = 8, k = 2, S = 1, I = 64, L = 32; dense I = 128.
constexpr char kSmallConfig[] = R"json({
  "model_type": "kimi_linear", "vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 4,
  "hidden_act": "situ", "activation_situ_beta": 4.0, "attn_res_block_size": 2,
  "intermediate_size": 128, "first_k_dense_replace": 1, "moe_layer_freq": 1,
  "linear_attn_config": {"kda_layers": [1, 2, 3], "full_attn_layers": [4], "num_heads": 4,
                         "head_dim": 16, "short_conv_kernel_size": 4, "gate_lower_bound": -5.0,
                         "use_full_rank_gate": true},
  "num_attention_heads": 4, "q_lora_rank": 32, "kv_lora_rank": 32, "qk_nope_head_dim": 16,
  "qk_rope_head_dim": 16, "v_head_dim": 16, "mla_use_nope": true, "mla_use_output_gate": true,
  "num_experts": 8, "num_experts_per_token": 2, "num_shared_experts": 1,
  "moe_intermediate_size": 64, "routed_expert_hidden_size": 32, "latent_moe_use_norm": true,
  "tie_word_embeddings": false
})json";

ModelConfig SmallConfig() {
  absl::StatusOr<ModelConfig> cfg = ParseModelConfig(kSmallConfig, "small.json");
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_TRUE(cfg->Validate().ok()) << cfg->Validate();
  return *cfg;
}

// TP 2 × DCP 2 × DP 2 on 10 MiB, reserve 10 % + 1 MiB, 4 slots, 4,096-token sequences.
ParallelPlanOptions SmallOptions() {
  ParallelPlanOptions o;
  o.tensor_parallel_size = 2;
  o.decode_context_parallel_size = 2;
  o.data_parallel_size = 2;
  o.device_memory_bytes = 10 << 20;
  o.reserve_fraction = 0.1;
  o.reserve_bytes = 1 << 20;
  o.max_num_seqs = 4;
  o.sequence_tokens = 4096;
  return o;
}

ModelConfig LoadReleased(const std::string& name) {
  const std::string dir = std::string(STRATA_SOURCE_DIR) + "/tests/data/configs/" + name;
  absl::StatusOr<ModelConfig> cfg = LoadModelConfig(dir);
  EXPECT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_TRUE(cfg->Validate().ok()) << cfg->Validate();
  return *cfg;
}

// Every figure below is worked out by hand from the rules in parallel_plan.h (rank 0 of
// T = 2, W = 4 ranks; Linears bf16 = 2 bytes, vectors f32 = 4 bytes).
TEST(ParallelPlanTest, SmallConfigWeightsByHand) {
  absl::StatusOr<ParallelPlan> plan = PlanParallel(SmallConfig(), SmallOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->world_size, 4);
  EXPECT_EQ(plan->kda_heads_per_rank, 2);
  EXPECT_EQ(plan->mla_heads_per_rank, 2);
  EXPECT_EQ(plan->max_experts_per_rank, 2);
  EXPECT_EQ(plan->num_moe_layers, 3);
  const PlanWeightBytes& w = plan->weights;
  // Embedding and LM head: 500 rows × 64 × 2 each.
  EXPECT_EQ(w.embedding_lm_head, 128000);
  // KDA (2 heads, P/T = 32): q,k,v 3·32·64·2 = 12288; b 2·64·2 = 256; f_a 16·64·2 = 2048;
  // f_b 32·16·2 = 1024; g 32·64·2 = 4096; o 64·32·2 = 4096; conv 3·32·4·4 = 1536; A_log 8;
  // dt_bias 128 → 25480 × 3 layers = 76440. MLA: q_a 32·64·2 = 4096; q_b 64·32·2 = 4096;
  // kv_a 48·64·2 = 6144; kv_b 64·32·2 = 4096; g 32·64·2 = 4096; o 64·32·2 = 4096 → 26624.
  EXPECT_EQ(w.mixers, 76440 + 26624);
  // Dense layer 0: 3·64·64·2 = 24576; shared (S·I/T = 32): 3·32·64·2 = 12288 × 3 MoE layers.
  EXPECT_EQ(w.dense_mlp_shared, 24576 + 36864);
  // latent_down 32·64·2 = 4096 + latent_up 32·32·2 = 2048, × 3.
  EXPECT_EQ(w.latent_moe, 18432);
  // 2 experts × (64·32 + 64·32 + 32·64)·2 = 24576 per layer, × 3.
  EXPECT_EQ(w.routed_experts, 73728);
  // Layer vectors (2 norms + 4 AttnRes) 6·64·4 × 4 layers = 6144; final + output AttnRes 768;
  // o_norm 16·4 × 3 = 192; q_a_norm + kv_a_norm (32 + 32)·4 = 256; per MoE layer router
  // 8·64·2 = 1024 + bias 32 + latent_norm 128 = 1184 × 3 = 3552.
  EXPECT_EQ(w.norms_routers, 6144 + 768 + 192 + 256 + 3552);
  EXPECT_EQ(w.total(), 395576);
}

TEST(ParallelPlanTest, SmallConfigQuantizedByHand) {
  ParallelPlanOptions o = SmallOptions();
  o.quantization = WeightQuantization::kMxfp4;
  absl::StatusOr<ParallelPlan> mxfp4 = PlanParallel(SmallConfig(), o);
  ASSERT_TRUE(mxfp4.ok()) << mxfp4.status();
  // w1, w3 [64, 32]: 64·16 codes + 64·1 scales = 1088; w2 [32, 64]: 32·32 + 32·2 = 1088.
  // 3264 per expert × 2 × 3 layers.
  EXPECT_EQ(mxfp4->weights.routed_experts, 19584);
  EXPECT_EQ(mxfp4->weights.mixers, 103064);  // nothing else changes
  EXPECT_EQ(mxfp4->routed_expert_format, "mxfp4");

  o.quantization = WeightQuantization::kInt8;
  absl::StatusOr<ParallelPlan> int8 = PlanParallel(SmallConfig(), o);
  ASSERT_TRUE(int8.ok()) << int8.status();
  const PlanWeightBytes& w = int8->weights;
  // int8 [r, c] = r·c + r·(c/32)·2. Embedding kept (64000); LM head 500·64 + 500·2·2 = 34000.
  EXPECT_EQ(w.embedding_lm_head, 98000);
  // KDA: q,k,v 3·(2048 + 128) = 6528; b 128 + 8 = 136; f_a 1024 + 64 = 1088; f_b kept (input
  // width 16 is not a multiple of 32) 1024; g 2176; o [64, 32] 2048 + 128 = 2176; f32 vectors
  // 1536 + 8 + 128 → 14800 × 3 = 44400. MLA: q_a 2176; q_b [64, 32] 2048 + 128 = 2176; kv_a
  // [48, 64] 3072 + 192 = 3264; kv_b kept 4096; g 2176; o 2176 → 16064.
  EXPECT_EQ(w.mixers, 44400 + 16064);
  // Dense [64, 64] 4096 + 256 = 4352 × 3 = 13056; shared gate/up [32, 64] 2176 × 2, down
  // [64, 32] 2048 + 128 = 2176 → 6528 × 3 = 19584.
  EXPECT_EQ(w.dense_mlp_shared, 13056 + 19584);
  // latent_down [32, 64] 2176 + latent_up [32, 32] 1024 + 64 = 1088 → 3264 × 3.
  EXPECT_EQ(w.latent_moe, 9792);
  // Experts: [64, 32] 2048 + 128 = 2176 × 3 matrices × 2 experts × 3 layers.
  EXPECT_EQ(w.routed_experts, 39168);
  EXPECT_EQ(w.norms_routers, 10912);  // routers kept
  EXPECT_EQ(w.total(), 250976);
  EXPECT_EQ(int8->projection_format, "int8");
}

TEST(ParallelPlanTest, SmallConfigCachesByHand) {
  absl::StatusOr<ParallelPlan> plan = PlanParallel(SmallConfig(), SmallOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  // reserve = floor(0.1 · (10485760 − 395576)) + 1048576 = 1009018 + 1048576.
  EXPECT_EQ(plan->reserve_bytes, 2057594);
  EXPECT_EQ(plan->cache_bytes, 10485760 - 395576 - 2057594);  // 8032590
  // bf16 latent row 48·2 = 96 bytes, one MLA layer.
  EXPECT_EQ(plan->latent_bytes_per_token, 96);
  // 3 KDA layers × (2·16·16·4 = 2048 state + 3·3·32·4 = 1152 conv).
  EXPECT_EQ(plan->kda_state_bytes_per_sequence, 9600);
  // Usable 8032590 − 7 regions · 256 = 8030798; 4 slots 38400 → 7992398; checkpoints
  // floor(799239.8) / 9600 = 83 (796800) → 7195598; blocks 7195598 / (64·96) = 1171.
  EXPECT_EQ(plan->state_slots, 4);
  EXPECT_EQ(plan->checkpoints, 83);
  EXPECT_EQ(plan->cache_tokens_per_rank, 1171 * 64);
  EXPECT_EQ(plan->cache_tokens_per_group, 2 * 1171 * 64);
  // A 4096-token sequence: 2048 tokens = 32 blocks (196608 bytes) + a 9600-byte slot per rank;
  // 8030798 / 206208 = 38.9 → 38 (39 leaves floor(7656398 / 6144) = 1246 < 1248 blocks).
  EXPECT_EQ(plan->sequence_tokens_per_rank, 2048);
  EXPECT_EQ(plan->sequences_per_group, 38);

  ParallelPlanOptions fp8 = SmallOptions();
  fp8.kv_cache_dtype = LatentDType::kFP8;
  absl::StatusOr<ParallelPlan> fp8_plan = PlanParallel(SmallConfig(), fp8);
  ASSERT_TRUE(fp8_plan.ok()) << fp8_plan.status();
  // 32 e4m3 codes + 1 f32 scale + 16 bf16 rope values = 68 bytes.
  EXPECT_EQ(fp8_plan->latent_bytes_per_token, 68);
}

TEST(ParallelPlanTest, SmallConfigCollectivesByHand) {
  absl::StatusOr<ParallelPlan> plan = PlanParallel(SmallConfig(), SmallOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  struct Expected {
    const char* name;
    int64_t calls, message, bus;
  };
  // f32 activations. T = 2: all-reduce bus = 2·1/2 of the message; all-gather 1/2.
  const Expected expected[] = {
      {"embedding all-reduce", 1, 64 * 4, 256},
      {"mixer all-reduce", 4, 256, 256},
      {"FFN all-reduce", 4, 256, 256},
      {"latent all-reduce", 3, 32 * 4, 128},
      {"logits all-gather", 1, 2 * 500 * 4, 2000},
      // D = 2: 2 rows of 32·4 bytes; half of the experts are in the other group.
      {"expert dispatch all-to-all", 3, 256, 128},
      {"expert combine all-to-all", 3, 256, 128},
      // C = 2: 2 ranks × 2 heads × 48 values × 4; outputs 2 × 2 × (32·4 + 4).
      {"DCP query all-gather", 1, 768, 384},
      {"DCP output merge", 1, 528, 264},
  };
  ASSERT_EQ(plan->collectives.size(), std::size(expected));
  int64_t bus = 0;
  for (size_t i = 0; i < std::size(expected); ++i) {
    const PlanCollective& c = plan->collectives[i];
    EXPECT_EQ(c.name, expected[i].name);
    EXPECT_EQ(c.calls_per_token, expected[i].calls) << c.name;
    EXPECT_EQ(c.message_bytes, expected[i].message) << c.name;
    EXPECT_EQ(c.bus_bytes, expected[i].bus) << c.name;
    bus += expected[i].calls * expected[i].bus;
  }
  EXPECT_EQ(plan->bus_bytes_per_token(), bus);

  ParallelPlanOptions one = SmallOptions();
  one.tensor_parallel_size = one.decode_context_parallel_size = one.data_parallel_size = 1;
  absl::StatusOr<ParallelPlan> single = PlanParallel(SmallConfig(), one);
  ASSERT_TRUE(single.ok()) << single.status();
  EXPECT_TRUE(single->collectives.empty());
}

TEST(ParallelPlanTest, TiedHeadIsCountedOnceUnlessInt8) {
  ModelConfig cfg = SmallConfig();
  cfg.tie_word_embeddings = true;
  absl::StatusOr<ParallelPlan> plan = PlanParallel(cfg, SmallOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->weights.embedding_lm_head, 64000);
  ParallelPlanOptions o = SmallOptions();
  o.quantization = WeightQuantization::kInt8;
  plan = PlanParallel(cfg, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->weights.embedding_lm_head, 98000);  // the head gets an int8 copy
}

TEST(ParallelPlanTest, Refusals) {
  const ModelConfig cfg = SmallConfig();
  auto refused = [&](ParallelPlanOptions o) {
    absl::StatusOr<ParallelPlan> plan = PlanParallel(cfg, o);
    EXPECT_FALSE(plan.ok());
    return plan.ok() ? std::string() : std::string(plan.status().message());
  };
  ParallelPlanOptions o = SmallOptions();
  o.tensor_parallel_size = 3;
  o.decode_context_parallel_size = 1;
  EXPECT_THAT(refused(o), HasSubstr("4 KDA heads cannot be split over --tensor-parallel-size 3"));

  ModelConfig three_kda = cfg;
  three_kda.kda.num_heads = 3;
  o = SmallOptions();
  absl::StatusOr<ParallelPlan> plan = PlanParallel(three_kda, o);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(),
              HasSubstr("3 KDA heads cannot be split over --tensor-parallel-size 2"));

  ModelConfig six_mla = cfg;
  six_mla.mla.num_heads = 6;
  o.tensor_parallel_size = 4;
  plan = PlanParallel(six_mla, o);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(),
              HasSubstr("6 MLA heads cannot be split over --tensor-parallel-size 4"));

  o = SmallOptions();
  o.tensor_parallel_size = 4;
  o.decode_context_parallel_size = 3;
  EXPECT_THAT(refused(o),
              HasSubstr("--decode-context-parallel-size 3 must divide --tensor-parallel-size 4"));
  o.decode_context_parallel_size = 0;
  EXPECT_THAT(refused(o), HasSubstr("must each be at least 1"));

  o = SmallOptions();
  o.device_memory_bytes = 300000;  // weights 395576: 95576 bytes short
  EXPECT_THAT(refused(o), HasSubstr("smaller than the weights of one rank"));
  o.device_memory_bytes = 395576 + 1000;  // the reserve (1 MiB) takes the rest
  EXPECT_THAT(refused(o), HasSubstr("no room for the caches"));

  o = SmallOptions();
  o.quantization = WeightQuantization::kCheckpoint;
  EXPECT_THAT(refused(o), HasSubstr("--quantization compressed-tensors needs"));

  o = SmallOptions();
  o.max_num_seqs = 1000;  // 1000 slots of 9600 bytes > the 8 MB cache
  EXPECT_THAT(refused(o), HasSubstr("KDA state slots need"));
}

TEST(ParallelPlanTest, DeviceShortfallIsNamed) {
  ParallelPlanOptions o = SmallOptions();
  o.device_memory_bytes = int64_t{395576} - (int64_t{1} << 18);  // 0.25 MiB short
  absl::StatusOr<ParallelPlan> plan = PlanParallel(SmallConfig(), o);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(),
              HasSubstr("is 256.00 KiB smaller than the weights of one rank (386.30 KiB"));
}

// The released configs parse, validate and plan; figures checked against the release's tensor
// shapes (docs/checkpoint.md §3, §4) by hand.
TEST(ParallelPlanTest, ReleasedKimiLinear) {
  const ModelConfig cfg = LoadReleased("kimi_linear");
  EXPECT_EQ(cfg.family, ModelFamily::kKimiLinear);
  EXPECT_EQ(cfg.NumKdaLayers(), 20);
  EXPECT_EQ(cfg.NumMlaLayers(), 7);
  ParallelPlanOptions o;
  o.device_memory_bytes = int64_t{141} << 30;
  absl::StatusOr<ParallelPlan> plan = PlanParallel(cfg, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // The release holds 49,122,681,728 parameters. Of them the engine keeps as f32 vectors:
  // conv 3·4096·4 + A_log 32 + dt_bias 4096 + o_norm 128 = 53408 × 20 KDA layers = 1068160;
  // kv_a_norm 512 × 7 = 3584; 2 norms · 2304 × 27 = 124416; final norm 2304; score bias
  // 256 × 26 = 6656 → 1205120. The rest (49,121,476,608) are bf16 Linears.
  EXPECT_EQ(plan->weights.total(), int64_t{49121476608} * 2 + int64_t{1205120} * 4);
  // 7 MLA layers × 576 × 2 bytes; KDA 20 × (32·128·128·4 + 3·3·4096·4).
  EXPECT_EQ(plan->latent_bytes_per_token, 7 * 1152);
  EXPECT_EQ(plan->kda_state_bytes_per_sequence, 20 * (2097152 + 147456));

  o.tensor_parallel_size = 3;
  plan = PlanParallel(cfg, o);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(),
              HasSubstr("32 KDA heads cannot be split over --tensor-parallel-size 3"));
}

TEST(ParallelPlanTest, ReleasedK3) {
  const ModelConfig cfg = LoadReleased("kimi_k3");
  EXPECT_EQ(cfg.family, ModelFamily::kKimiK3);
  EXPECT_EQ(cfg.NumKdaLayers(), 69);
  EXPECT_EQ(cfg.NumMlaLayers(), 24);
  EXPECT_TRUE(cfg.moe.mxfp4_experts);
  ParallelPlanOptions o;
  o.tensor_parallel_size = 8;
  o.decode_context_parallel_size = 8;
  o.data_parallel_size = 2;
  o.device_memory_bytes = int64_t{141} << 30;
  absl::StatusOr<ParallelPlan> plan = PlanParallel(cfg, o);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->routed_expert_format, "mxfp4");
  // 896 experts over 16 ranks = 56; MXFP4 w1, w3 [3072, 3584] 3072·1792 + 3072·112 = 5849088,
  // w2 [3584, 3072] 3584·1536 + 3584·96 = 5849088; × 3 × 56 × 92 MoE layers.
  EXPECT_EQ(plan->weights.routed_experts, int64_t{5849088} * 3 * 56 * 92);
  // Vocab-parallel: 20480 rows × 7168 × 2, embedding and head.
  EXPECT_EQ(plan->weights.embedding_lm_head, int64_t{20480} * 7168 * 2 * 2);
  EXPECT_EQ(plan->kda_heads_per_rank, 12);
  // 1M tokens over DCP 8: 131072 per rank.
  EXPECT_EQ(plan->sequence_tokens_per_rank, 131072);
  EXPECT_GT(plan->sequences_per_group, 0);

  // On 8 H100s the MXFP4 experts alone (112 a rank) exceed 80 GiB.
  o.data_parallel_size = 1;
  o.device_memory_bytes = int64_t{80} << 30;
  plan = PlanParallel(cfg, o);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(), HasSubstr("smaller than the weights of one rank"));

  o.tensor_parallel_size = 5;
  o.decode_context_parallel_size = 1;
  plan = PlanParallel(cfg, o);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.status().message(),
              HasSubstr("96 KDA heads cannot be split over --tensor-parallel-size 5"));
}

TEST(ParallelPlanTest, JsonAndTable) {
  absl::StatusOr<ParallelPlan> plan = PlanParallel(SmallConfig(), SmallOptions());
  ASSERT_TRUE(plan.ok()) << plan.status();
  const nlohmann::json j = nlohmann::json::parse(ParallelPlanJson(*plan));
  EXPECT_EQ(j["weight_bytes_per_rank"]["total"], 395576);
  EXPECT_EQ(j["cache_tokens_per_group"], 2 * 1171 * 64);
  EXPECT_EQ(j["sequences_per_group"], 38);
  EXPECT_EQ(j["collectives"].size(), 9u);
  EXPECT_EQ(j["collectives"][1]["bus_bytes_per_token"], 4 * 256);
  const std::string table = ParallelPlanTable(*plan);
  EXPECT_THAT(table, HasSubstr("TP 2 x DCP 2 x DP 2 = 4 ranks"));
  EXPECT_THAT(table, HasSubstr("149,888 per group"));
}

}  // namespace
}  // namespace strata::engine
