#include "scheduler/internal/sequence.h"

#include <algorithm>
#include <utility>

#include "kvcache/block_hash.h"

namespace strata::scheduler::internal {

Sequence::Sequence(SequenceId id_in, Request request_in, int64_t arrival_in, int block_size_in,
                   bool hash_blocks_in)
    : id(id_in),
      request(std::move(request_in)),
      tokens(std::move(request.prompt)),
      num_prompt_tokens(static_cast<int64_t>(tokens.size())),
      arrival(arrival_in),
      block_size(block_size_in),
      hash_blocks(hash_blocks_in) {
  request.prompt.clear();
  for (const engine::MediaEmbedding& m : request.media) {
    media_keys.push_back({m.position, m.end(), m.content_key});
  }
  if (hash_blocks) {
    block_hashes = kvcache::HashFullBlocks(tokens, block_size, request.cache_salt, media_keys);
  }
}

void Sequence::AppendToken(int32_t token) {
  tokens.push_back(token);
  if (!hash_blocks || tokens.size() % static_cast<size_t>(block_size) != 0) return;
  kvcache::BlockHash parent = block_hashes.empty() ? kvcache::kRootHash : block_hashes.back();
  const int32_t* block = tokens.data() + tokens.size() - static_cast<size_t>(block_size);
  const int64_t index = static_cast<int64_t>(block_hashes.size());
  block_hashes.push_back(
      kvcache::HashBlock(parent, block, block_size,
                         kvcache::BlockSalt(request.cache_salt, index, block_size, media_keys)));
}

std::optional<FinishReason> Sequence::StopReason() const {
  if (num_output_tokens() <= 0) return std::nullopt;
  int32_t last = tokens.back();
  if (!request.ignore_eos && request.eos_token_id >= 0 && last == request.eos_token_id) {
    return FinishReason::kStop;
  }
  const auto& stops = request.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), last) != stops.end()) return FinishReason::kStop;
  if (num_output_tokens() >= request.max_tokens) return FinishReason::kLength;
  return std::nullopt;
}

}  // namespace strata::scheduler::internal
