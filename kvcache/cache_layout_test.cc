#include "kvcache/cache_layout.h"

#include "gtest/gtest.h"
#include "kvcache/memory_planner.h"

namespace strata::kvcache {
namespace {

TEST(CacheLayoutTest, LatentRowBytesPerDtype) {
  EXPECT_EQ(LatentBytesPerToken(LatentDType::kF32, 576, 64), 2304);
  EXPECT_EQ(LatentBytesPerToken(LatentDType::kBF16, 576, 64), 1152);
  EXPECT_EQ(LatentBytesPerToken(LatentDType::kFP8, 576, 64), 656);  // 512 + 4 * 4 + 64 * 2
}

TEST(CacheLayoutTest, K3SizesMatchTheModelNotes) {
  // docs/model.md section 8.1: K3 has 24 MLA layers and 69 KDA layers of 96 heads x 128.
  CacheLayout layout;
  layout.num_mla_layers = 24;
  layout.num_kda_layers = 69;
  layout.kda_state_bytes_per_layer = KdaStateBytes(96, 128, 4);
  layout.kda_conv_bytes_per_layer = KdaConvBytes(96, 128, 4, 2);
  EXPECT_EQ(layout.kda_state_bytes_per_layer, 6 * 1024 * 1024);
  EXPECT_EQ(layout.kda_conv_bytes_per_layer, 216 * 1024);
  EXPECT_EQ(layout.mla_bytes_per_token(), 27648);
  EXPECT_EQ(layout.state_bytes_per_sequence(), 449372160);  // 428.6 MiB
  layout.latent_dtype = LatentDType::kFP8;
  EXPECT_EQ(layout.mla_bytes_per_token(), 15744);
}

TEST(CacheLayoutTest, RegionsAreAlignedAndInOrder) {
  CacheLayout layout;
  layout.num_mla_layers = 2;
  layout.latent_dim = 576;
  layout.latent_dtype = LatentDType::kBF16;
  layout.block_size = 5;
  layout.num_blocks = 3;  // 3 * 5 * 1152 = 17,280 bytes -> 17,408 aligned
  layout.num_kda_layers = 2;
  layout.kda_state_bytes_per_layer = 1000;  // 3 rows: 3,000 -> 3,072
  layout.kda_conv_bytes_per_layer = 100;    // 3 rows: 300 -> 512
  layout.num_slots = 2;
  layout.num_checkpoints = 1;
  ASSERT_TRUE(layout.Validate().ok());
  EXPECT_EQ(layout.page_bytes(), 5760);
  EXPECT_EQ(layout.num_tokens(), 15);
  EXPECT_EQ(layout.MlaLayerOffset(0), 0);
  EXPECT_EQ(layout.MlaLayerOffset(1), 17408);
  EXPECT_EQ(layout.KdaStateOffset(0), 34816);
  EXPECT_EQ(layout.KdaConvOffset(0), 34816 + 3072);
  EXPECT_EQ(layout.KdaStateOffset(1), 34816 + 3072 + 512);
  EXPECT_EQ(layout.KdaConvOffset(1), 34816 + 3584 + 3072);
  EXPECT_EQ(layout.TotalBytes(), 34816 + 2 * 3584);
  EXPECT_EQ(layout.num_state_rows(), 3);
  EXPECT_EQ(layout.SlotRow(1), 1);
  EXPECT_EQ(layout.CheckpointRow(0), 2);
}

TEST(CacheLayoutTest, ValidateRejectsBadShapes) {
  CacheLayout layout;
  layout.block_size = 0;
  EXPECT_FALSE(layout.Validate().ok());
  layout.block_size = 64;
  layout.latent_dtype = LatentDType::kFP8;
  layout.latent_dim = 64;  // nothing left for the latent part besides the 64 rope dims
  EXPECT_FALSE(layout.Validate().ok());
  layout.latent_dim = 576;
  EXPECT_TRUE(layout.Validate().ok());
  layout.num_kda_layers = 1;
  EXPECT_FALSE(layout.Validate().ok());  // no state size
}

TEST(CacheLayoutTest, SmallLatentsFitEveryFormat) {
  CacheLayout layout;
  layout.block_size = 16;
  layout.num_mla_layers = 1;
  layout.num_blocks = 2;
  layout.latent_dim = 40;  // tiny test models: kv_lora 32 + rope 8
  layout.rope_dim = 8;
  layout.latent_dtype = LatentDType::kF32;
  EXPECT_TRUE(layout.Validate().ok());
  EXPECT_EQ(layout.TotalBytes(), 2 * 16 * 40 * 4);
  layout.latent_dtype = LatentDType::kFP8;  // 32 codes, one scale, 8 bf16 rope values
  EXPECT_TRUE(layout.Validate().ok());
  EXPECT_EQ(layout.TotalBytes(), 1792);  // 2 * 16 * 52 = 1664 bytes, regions 256-aligned
  layout.latent_dtype = LatentDType::kF32;
  layout.latent_dim = 0;
  EXPECT_FALSE(layout.Validate().ok());
}

}  // namespace
}  // namespace strata::kvcache
