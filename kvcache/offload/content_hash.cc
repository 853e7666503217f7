// content_hash.h: the four-lane SplitMix64 content hash.
#include "kvcache/offload/content_hash.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/splitmix64.h"

namespace strata::kvcache {
namespace {

constexpr uint64_t kHash64Key = 0x5354524154414b56ull;   // "STRATAKV"
constexpr uint64_t kHash128Key = 0x4f46464c4f414431ull;  // "OFFLOAD1"

constexpr uint64_t Absorb(uint64_t h, uint64_t w) {
  return SplitMix64Mix((h ^ w) + kSplitMix64Golden);
}

uint64_t LoadLittleEndian(const char* p) {
  uint64_t word;
  std::memcpy(&word, p, sizeof(word));
  if constexpr (std::endian::native == std::endian::big) word = __builtin_bswap64(word);
  return word;
}

}  // namespace

ContentHasher::ContentHasher(uint64_t seed) {
  for (int i = 0; i < 4; ++i) {
    lanes_[i] = SplitMix64Mix(seed + static_cast<uint64_t>(i + 1) * kSplitMix64Golden);
  }
}

void ContentHasher::AbsorbWord(uint64_t word) {
  uint64_t& lane = lanes_[num_words_ & 3];
  lane = Absorb(lane, word);
  ++num_words_;
}

void ContentHasher::Update(std::string_view bytes) {
  length_bytes_ += bytes.size();
  const char* p = bytes.data();
  size_t n = bytes.size();
  if (tail_bytes_ > 0) {
    const size_t take = std::min<size_t>(n, 8 - tail_bytes_);
    std::memcpy(tail_.data() + tail_bytes_, p, take);
    tail_bytes_ += static_cast<int>(take);
    p += take;
    n -= take;
    if (tail_bytes_ < 8) return;
    AbsorbWord(LoadLittleEndian(tail_.data()));
    tail_bytes_ = 0;
  }
  // Whole stripes of four words: the four lanes' chains are independent.
  if ((num_words_ & 3) == 0) {
    uint64_t l0 = lanes_[0], l1 = lanes_[1], l2 = lanes_[2], l3 = lanes_[3];
    for (; n >= 32; p += 32, n -= 32) {
      l0 = Absorb(l0, LoadLittleEndian(p));
      l1 = Absorb(l1, LoadLittleEndian(p + 8));
      l2 = Absorb(l2, LoadLittleEndian(p + 16));
      l3 = Absorb(l3, LoadLittleEndian(p + 24));
      num_words_ += 4;
    }
    lanes_ = {l0, l1, l2, l3};
  }
  for (; n >= 8; p += 8, n -= 8) AbsorbWord(LoadLittleEndian(p));
  std::memcpy(tail_.data(), p, n);
  tail_bytes_ = static_cast<int>(n);
}

void ContentHasher::UpdateU64(uint64_t value) {
  char bytes[8];
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((value >> (8 * i)) & 0xff);
  Update(std::string_view(bytes, 8));
}

void ContentHasher::UpdateString(std::string_view text) {
  UpdateU64(text.size());
  Update(text);
}

uint64_t ContentHasher::Digest(uint64_t key) const {
  ContentHasher done = *this;
  if (done.tail_bytes_ > 0) {
    std::array<char, 8> padded{};
    std::memcpy(padded.data(), tail_.data(), tail_bytes_);
    done.AbsorbWord(LoadLittleEndian(padded.data()));
  }
  uint64_t h = key;
  for (uint64_t lane : done.lanes_) h = Absorb(h, lane);
  return Absorb(h, length_bytes_);
}

uint64_t ContentHasher::Hash64() const { return Digest(kHash64Key); }

std::string ContentHasher::Hash128Hex() const {
  return absl::StrFormat("%016x%016x", Digest(kHash128Key), Digest(kHash64Key));
}

uint64_t ContentHash64(std::string_view bytes) {
  ContentHasher hasher;
  hasher.Update(bytes);
  return hasher.Hash64();
}

}  // namespace strata::kvcache
