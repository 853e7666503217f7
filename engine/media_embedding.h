// An image in a token sequence: the rows the vision encoder made of it and the positions they
// take (docs/vision.md, "Into the sequence"). A prompt names each image with one placeholder id
// (the config's media_placeholder_token_id); ExpandMediaPlaceholders gives each image as many
// positions as it has rows, and the forward takes the rows there instead of the placeholder's
// embedding (EmbeddingRows, engine/forward_batch.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/forward_batch.h"

namespace strata::engine {

struct MediaEmbedding {
  int64_t position = 0;  // index of its first row in the (expanded) token sequence
  int64_t num_rows = 0;
  // The image's identity (64 bits of the SHA-256 of its encoded bytes): folded into the block
  // hashes of the blocks it covers, so a prefix-cache hit needs the same image.
  uint64_t content_key = 0;
  // [num_rows, hidden_size] f32. Null on a tensor-parallel follower: only the lead writes an
  // image's rows (the others zeros; the group sums them), so only it has them.
  std::shared_ptr<const std::vector<float>> rows;

  int64_t end() const { return position + num_rows; }
};

// Replaces the i-th `placeholder_id` in `ids` by rows_per_image[i] copies of it (one position
// per row) and sets media[i].position accordingly (media[i].num_rows must equal
// rows_per_image[i]; media is in image order). InvalidArgument when the number of placeholders
// differs from the number of images (naming both counts).
absl::StatusOr<std::vector<int32_t>> ExpandMediaPlaceholders(const std::vector<int32_t>& ids,
                                                             int32_t placeholder_id,
                                                             std::vector<MediaEmbedding>* media);

// The parts of `media` (ascending, not overlapping) inside tokens [begin, begin + count), as
// EmbeddingRows relative to `begin` (appended to `out`; rows null where the media's are).
// `hidden` is the row width.
void MediaRowsIn(absl::Span<const MediaEmbedding> media, int64_t begin, int64_t count,
                 int64_t hidden, std::vector<EmbeddingRows>* out);

// The images' positions are ascending, do not overlap, and lie inside [0, num_tokens), each
// with rows of num_rows × hidden values: InvalidArgument naming the image otherwise.
absl::Status ValidateMedia(absl::Span<const MediaEmbedding> media, int64_t num_tokens,
                           int64_t hidden);

}  // namespace strata::engine
