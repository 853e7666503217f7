// Images in chat requests (docs/vision.md): each `image_url` part's data: URL (or, when the
// server allows them, an http(s) URL of an allowed host or a file:// URL under the allowed
// directory) is decoded and cut into patches while the request is parsed (a bad image is a 400
// naming the part, before any engine work), and encoded by the model's vision tower once per
// distinct image (an LRU cache of the tower's rows keyed by the image bytes' SHA-256, so n > 1,
// retries and an image sent again reuse them).
//
// Thread-safe: the HTTP and gRPC handlers call it concurrently. The tower runs on the encoder
// thread only (EncodeInBackground: one image at a time, in arrival order, so its working memory
// is one image's and the HTTP I/O threads keep serving while it runs), never on the engine
// thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "engine/media/image_decode.h"
#include "engine/media_embedding.h"
#include "engine/vision/image_input.h"
#include "engine/vision/vision_encoder.h"
#include "server/frontend/encoder_budget.h"

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
  double encode_seconds = 0;   // their time, summed (waits for encoder-budget grants excluded)
  int64_t cache_hits = 0;      // images served from the cache
  int64_t cache_bytes = 0;
  int64_t images_waiting = 0;   // queued for the encoder thread (not the one it is encoding)
  int64_t images_encoding = 0;  // on the encoder thread now (0 or 1)
};

// One request's images on their way through the encoder thread (ImageInputs::EncodeInBackground).
// Thread-safe.
class ImageEncodeJob {
 public:
  // True once every image has its rows.
  bool done() const;
  // Calls `wake` (from the encoder thread) when the job is done; at once when it is already.
  // Replaces an earlier one.
  void OnDone(std::function<void()> wake);
  // The request went away: images not encoded yet are skipped, and `wake` is not called.
  void Cancel();
  // Blocks the calling thread until done() or `timeout` passed; returns done() (gRPC's
  // handlers, which have threads of their own, wait in slices to see their client leave).
  bool WaitFor(std::chrono::milliseconds timeout) const;
  // The media with their rows and positions, in prompt order. Only once done().
  std::vector<engine::MediaEmbedding> media() const;

 private:
  friend class ImageInputs;
  mutable std::mutex mu_;
  mutable std::condition_variable done_cv_;
  std::vector<std::shared_ptr<const engine::PreparedImage>> images_;
  std::vector<engine::MediaEmbedding> media_;
  size_t next_ = 0;  // the first image without rows
  bool cancelled_ = false;
  std::function<void()> wake_;
};

class ImageInputs {
 public:
  ImageInputs(const engine::ImageEncoder* encoder, int32_t placeholder_id, ImageInputLimits limits);
  // Stops the encoder thread after the image it is encoding (queued jobs stay undone: their
  // responses are cancelled with the server).
  ~ImageInputs();

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

  // Rows for media[i] from images[i] (positions kept): those in the cache at once, the others
  // queued for the encoder thread. The job is done on return when every image was cached.
  std::shared_ptr<ImageEncodeJob> EncodeInBackground(
      std::vector<std::shared_ptr<const engine::PreparedImage>> images,
      std::vector<engine::MediaEmbedding> media);

  ImageInputStats stats() const;

  // Paces the tower against the engine's steps (encoder_budget.h; null: unpaced). Set before the
  // first request; must outlive this (which stops it first).
  void SetEncoderBudget(EncoderBudget* budget) { budget_ = budget; }
  EncoderBudget* encoder_budget() const { return budget_; }

 private:
  // The bytes behind an allowed http(s) URL / file:// URL (400s naming the part otherwise).
  absl::StatusOr<std::string> FetchRemote(const std::string& url, const std::string& param,
                                          const std::string& what) const;
  absl::StatusOr<std::string> ReadLocal(const std::string& url, const std::string& param,
                                        const std::string& what) const;

  // The image's rows (from the cache, or encoded now on this thread and cached).
  engine::MediaEmbedding Encode(const engine::PreparedImage& image);
  using Rows = std::shared_ptr<const std::vector<float>>;
  Rows Lookup(uint64_t key);
  // Counts a tower run of `encode_seconds` and keeps its rows (LRU).
  void Insert(uint64_t key, Rows rows, double encode_seconds);
  // The encoder thread: jobs in arrival order, a job's images in prompt order.
  void EncoderLoop();

  const engine::ImageEncoder* encoder_;
  const int32_t placeholder_id_;
  const ImageInputLimits limits_;

  mutable std::mutex mu_;
  std::list<std::pair<uint64_t, Rows>> lru_;  // most recent first
  std::unordered_map<uint64_t, std::list<std::pair<uint64_t, Rows>>::iterator> index_;
  ImageInputStats stats_;

  // The encoder thread (started with the first job that needs it) and its queue.
  mutable std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<std::shared_ptr<ImageEncodeJob>> queue_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> encoding_{0};  // ImageInputStats::images_encoding
  std::thread encoder_thread_;
  EncoderBudget* budget_ = nullptr;
};

// The image parts of chat messages, in message and part order: (url, the part's param path).
struct ImagePart {
  std::string url;
  std::string param;
};
std::vector<ImagePart> FindImageParts(const nlohmann::ordered_json& messages);

}  // namespace strata::frontend
