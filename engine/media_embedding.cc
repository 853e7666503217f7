#include "engine/media_embedding.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace strata::engine {

absl::StatusOr<std::vector<int32_t>> ExpandMediaPlaceholders(const std::vector<int32_t>& ids,
                                                             int32_t placeholder_id,
                                                             std::vector<MediaEmbedding>* media) {
  const int64_t placeholders = std::count(ids.begin(), ids.end(), placeholder_id);
  if (placeholders != static_cast<int64_t>(media->size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt has ", placeholders, " media placeholder",
                     placeholders == 1 ? "" : "s", " (id ", placeholder_id, ") but ", media->size(),
                     " image", media->size() == 1 ? " was" : "s were",
                     " given: each image needs exactly one placeholder"));
  }
  std::vector<int32_t> expanded;
  size_t next = 0;
  for (int32_t id : ids) {
    if (id != placeholder_id) {
      expanded.push_back(id);
      continue;
    }
    MediaEmbedding& m = (*media)[next++];
    m.position = static_cast<int64_t>(expanded.size());
    expanded.insert(expanded.end(), static_cast<size_t>(m.num_rows), placeholder_id);
  }
  return expanded;
}

void MediaRowsIn(absl::Span<const MediaEmbedding> media, int64_t begin, int64_t count,
                 int64_t hidden, std::vector<EmbeddingRows>* out) {
  const int64_t end = begin + count;
  for (const MediaEmbedding& m : media) {
    const int64_t first = std::max(begin, m.position), last = std::min(end, m.end());
    if (first >= last) continue;
    const float* rows =
        m.rows != nullptr ? m.rows->data() + (first - m.position) * hidden : nullptr;
    out->push_back({first - begin, last - first, rows});
  }
}

absl::Status ValidateMedia(absl::Span<const MediaEmbedding> media, int64_t num_tokens,
                           int64_t hidden) {
  int64_t previous_end = 0;
  for (size_t i = 0; i < media.size(); ++i) {
    const MediaEmbedding& m = media[i];
    if (m.position < previous_end || m.num_rows < 1 || m.end() > num_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "image ", i, " takes positions [", m.position, ", ", m.end(), ") of a sequence of ",
          num_tokens, " tokens (images must not overlap and must lie inside it)"));
    }
    if (m.rows == nullptr || static_cast<int64_t>(m.rows->size()) != m.num_rows * hidden) {
      return absl::InvalidArgumentError(
          absl::StrCat("image ", i, " has ", m.rows == nullptr ? 0 : m.rows->size(), " values for ",
                       m.num_rows, " rows of width ", hidden));
    }
    previous_end = m.end();
  }
  return absl::OkStatus();
}

}  // namespace strata::engine
