// Images in chat requests (docs/vision.md): each `image_url` part's data: URL (or, when the
// server allows them, an http(s) URL of an allowed host or a file:// URL under the allowed
// directory) is decoded and cut into patches while the request is parsed (a bad image is a 400
// naming the part, before any engine work), and encoded by the model's vision tower once per
// distinct image (an LRU cache of the tower's rows keyed by the image bytes' SHA-256, so n > 1,
// retries and an image sent again reuse them).
//
// Thread-safe: the HTTP handlers call it concurrently. Encoding runs on the calling handler's
// thread, never on the engine thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/media/image_decode.h"
#include "engine/media_embedding.h"
#include "engine/vision/image_input.h"
#include "engine/vision/vision_encoder.h"

namespace strata::frontend {

struct ImageInputLimits {
  int max_images_per_request = 32;
  int64_t max_image_bytes = int64_t{20} << 20;  // one image's file (after base64)
  media::ImageDecodeLimits decode;
  int64_t encoder_cache_bytes = int64_t{1} << 30;  // the tower's rows kept for reuse
  // vLLM's opt-ins: http(s) URLs are fetched only from these hosts (exact names), file:// URLs
  // read only under this directory (symbolic links resolved first). Empty: refused.
  std::vector<std::string> allowed_media_domains;
  std::string allowed_local_media_path;
  std::chrono::milliseconds fetch_timeout{5000};  // one remote image, the whole exchange
};

struct ImageInputStats {
  int64_t images_encoded = 0;  // tower runs
  int64_t cache_hits = 0;      // images served from the cache
  int64_t cache_bytes = 0;
};

class ImageInputs {
 public:
  // `unavailable` non-empty: images are refused with that reason (a multi-rank server).
  ImageInputs(const engine::VisionEncoder* encoder, int32_t placeholder_id, ImageInputLimits limits,
              std::string unavailable = "");

  int32_t placeholder_id() const { return placeholder_id_; }
  const ImageInputLimits& limits() const { return limits_; }

  // The image a part's URL holds, decoded and cut into patches. `param` names the part in the
  // 400 (e.g. messages[0].content[1].image_url.url) and `what` starts its message (e.g.
  // "image 2": APIs whose fields differ from chat's still say which image).
  absl::StatusOr<engine::PreparedImage> Prepare(const std::string& url, const std::string& param,
                                                const std::string& what = "image") const;
  // The same for an image file's bytes (gRPC).
  absl::StatusOr<engine::PreparedImage> PrepareBytes(std::string_view bytes,
                                                     const std::string& param,
                                                     const std::string& what = "image") const;

  // The image's rows (from the cache, or encoded now and cached).
  engine::MediaEmbedding Encode(const engine::PreparedImage& image);

  ImageInputStats stats() const;

 private:
  // The bytes behind an allowed http(s) URL / file:// URL (400s naming the part otherwise).
  absl::StatusOr<std::string> FetchRemote(const std::string& url, const std::string& param,
                                          const std::string& what) const;
  absl::StatusOr<std::string> ReadLocal(const std::string& url, const std::string& param,
                                        const std::string& what) const;

  using Rows = std::shared_ptr<const std::vector<float>>;
  Rows Lookup(uint64_t key);
  void Insert(uint64_t key, Rows rows);

  const engine::VisionEncoder* encoder_;
  const int32_t placeholder_id_;
  const ImageInputLimits limits_;
  const std::string unavailable_;

  mutable std::mutex mu_;
  std::list<std::pair<uint64_t, Rows>> lru_;  // most recent first
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, Rows>>::iterator> index_;
  ImageInputStats stats_;
};

// The image parts of chat messages, in message and part order: (url, the part's param path).
struct ImagePart {
  std::string url;
  std::string param;
};
std::vector<ImagePart> FindImageParts(const nlohmann::ordered_json& messages);

}  // namespace strata::frontend
