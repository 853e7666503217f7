#include "server/frontend/image_inputs.h"

#include <pthread.h>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "core/file.h"
#include "core/status.h"
#include "server/frontend/api_error.h"
#include "server/http/http_fetch.h"

namespace strata::frontend {

ImageInputs::ImageInputs(const engine::ImageEncoder* encoder, int32_t placeholder_id,
                         ImageInputLimits limits)
    : encoder_(encoder), placeholder_id_(placeholder_id), limits_(limits) {}

ImageInputs::~ImageInputs() {
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    stopping_ = true;
  }
  if (budget_ != nullptr) budget_->Stop();  // an image waiting for grants finishes now
  queue_cv_.notify_all();
  if (encoder_thread_.joinable()) encoder_thread_.join();
}

bool ImageEncodeJob::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_ == images_.size();
}

void ImageEncodeJob::OnDone(std::function<void()> wake) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_) return;
    if (next_ < images_.size()) {
      wake_ = std::move(wake);
      return;
    }
  }
  if (wake) wake();
}

void ImageEncodeJob::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
  wake_ = nullptr;
}

bool ImageEncodeJob::WaitFor(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return done_cv_.wait_for(lock, timeout, [&] { return next_ == images_.size(); });
}

std::vector<engine::MediaEmbedding> ImageEncodeJob::media() const {
  std::lock_guard<std::mutex> lock(mu_);
  CHECK_EQ(next_, images_.size()) << "the images are not encoded yet";
  return media_;
}

absl::StatusOr<engine::PreparedImage> ImageInputs::Prepare(const std::string& url,
                                                           const std::string& param,
                                                           const std::string& what) const {
  if (absl::StartsWithIgnoreCase(url, "http://") || absl::StartsWithIgnoreCase(url, "https://")) {
    ASSIGN_OR_RETURN(const std::string bytes, FetchRemote(url, param, what));
    return PrepareBytes(bytes, param, what);
  }
  if (absl::StartsWithIgnoreCase(url, "file://")) {
    ASSIGN_OR_RETURN(const std::string bytes, ReadLocal(url, param, what));
    return PrepareBytes(bytes, param, what);
  }
  absl::StatusOr<media::DataUrl> data = media::ParseDataUrl(url, limits_.max_image_bytes);
  if (!data.ok()) {
    return InvalidField(param, absl::StrCat(what, ": ", data.status().message()), "invalid_image");
  }
  return PrepareBytes(data->bytes, param, what);
}

absl::StatusOr<std::string> ImageInputs::FetchRemote(const std::string& url,
                                                     const std::string& param,
                                                     const std::string& what) const {
  if (limits_.allowed_media_domains.empty()) {
    return InvalidField(param,
                        absl::StrCat(what,
                                     ": remote image URLs are not fetched by this server (it "
                                     "fetches only from the hosts of --allowed-media-domains); "
                                     "send the image inline (a data: URL, "
                                     "data:image/png;base64,..., or a base64 image source)"),
                        "unsupported_value");
  }
  absl::StatusOr<http::HttpUrl> parsed = http::ParseHttpUrl(url);
  if (!parsed.ok()) {
    return InvalidField(param, absl::StrCat(what, ": ", parsed.status().message()),
                        "invalid_image");
  }
  const auto& allowed = limits_.allowed_media_domains;
  if (std::find(allowed.begin(), allowed.end(), parsed->host) == allowed.end()) {
    return InvalidField(
        param,
        absl::StrCat(what, ": the host '", parsed->host, "' is not one of --allowed-media-domains"),
        "unsupported_value");
  }
  absl::StatusOr<std::string> bytes =
      http::FetchUrl(*parsed, {limits_.max_image_bytes, limits_.fetch_timeout});
  if (!bytes.ok()) {
    return InvalidField(param, absl::StrCat(what, ": ", bytes.status().message()), "invalid_image");
  }
  return bytes;
}

absl::StatusOr<std::string> ImageInputs::ReadLocal(const std::string& url, const std::string& param,
                                                   const std::string& what) const {
  auto refuse = [&](const std::string& reason) {
    return InvalidField(param, absl::StrCat(what, ": ", reason), "unsupported_value");
  };
  if (limits_.allowed_local_media_path.empty()) {
    return refuse(
        "file:// URLs are read only under --allowed-local-media-path (not set on this server)");
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path root = fs::canonical(limits_.allowed_local_media_path, ec);
  if (ec) return refuse("--allowed-local-media-path cannot be resolved");
  const fs::path file = fs::canonical(fs::path(url.substr(7)), ec);
  if (ec) return refuse(absl::StrCat("cannot open '", url.substr(7), "'"));
  const std::string root_prefix = root.string() + "/";
  if (!absl::StartsWith(file.string(), root_prefix)) {
    return refuse(absl::StrCat("'", url.substr(7), "' is not under --allowed-local-media-path"));
  }
  const uintmax_t size = fs::file_size(file, ec);
  if (ec || !fs::is_regular_file(file, ec)) return refuse("not a regular file");
  if (size > static_cast<uintmax_t>(limits_.max_image_bytes)) {
    return InvalidField(param,
                        absl::StrCat(what, ": the file has ", size, " bytes, over the limit of ",
                                     limits_.max_image_bytes),
                        "invalid_image");
  }
  absl::StatusOr<std::string> bytes = ReadFileToString(file.string());
  if (!bytes.ok()) return refuse(absl::StrCat("cannot read '", url.substr(7), "'"));
  return bytes;
}

absl::StatusOr<engine::PreparedImage> ImageInputs::PrepareBytes(std::string_view bytes,
                                                                const std::string& param,
                                                                const std::string& what) const {
  absl::StatusOr<engine::PreparedImage> image =
      engine::PrepareImage(bytes, encoder_->config(), limits_.decode);
  if (!image.ok()) {
    return InvalidField(param, absl::StrCat(what, ": ", image.status().message()), "invalid_image");
  }
  return image;
}

ImageInputs::Rows ImageInputs::Lookup(uint64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  ++stats_.cache_hits;
  return it->second->second;
}

void ImageInputs::Insert(uint64_t key, Rows rows, double encode_seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.images_encoded;
  stats_.encode_seconds += encode_seconds;
  if (index_.contains(key)) return;  // another request encoded it meanwhile
  const auto bytes = [](const Rows& r) { return static_cast<int64_t>(r->size() * sizeof(float)); };
  if (bytes(rows) > limits_.encoder_cache_bytes) return;
  lru_.emplace_front(key, std::move(rows));
  index_[key] = lru_.begin();
  stats_.cache_bytes += bytes(lru_.front().second);
  while (stats_.cache_bytes > limits_.encoder_cache_bytes) {
    stats_.cache_bytes -= bytes(lru_.back().second);
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

engine::MediaEmbedding ImageInputs::Encode(const engine::PreparedImage& image) {
  if (Rows rows = Lookup(image.content_key)) {
    engine::MediaEmbedding m;
    m.num_rows = image.num_rows;
    m.content_key = image.content_key;
    m.rows = std::move(rows);
    return m;
  }
  using Clock = std::chrono::steady_clock;
  const auto started = Clock::now();
  // The tower's own time: the waits for the engine's grants are the budget's (its stats).
  double paced_seconds = 0;
  engine::ImageEncoder::BeforeBlock pace;
  if (budget_ != nullptr) {
    pace = [budget = budget_, &paced_seconds](int64_t patches) {
      const auto asked = Clock::now();
      budget->Take(patches);
      paced_seconds += std::chrono::duration<double>(Clock::now() - asked).count();
    };
  }
  engine::MediaEmbedding m = engine::EncodeImage(*encoder_, image, pace);
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  Insert(image.content_key, m.rows, std::max(0.0, seconds - paced_seconds));
  return m;
}

std::shared_ptr<ImageEncodeJob> ImageInputs::EncodeInBackground(
    std::vector<std::shared_ptr<const engine::PreparedImage>> images,
    std::vector<engine::MediaEmbedding> media) {
  CHECK_EQ(images.size(), media.size());
  auto job = std::make_shared<ImageEncodeJob>();
  job->images_ = std::move(images);
  job->media_ = std::move(media);
  // Images in the cache need no turn on the encoder thread (a request sent again, n > 1).
  while (job->next_ < job->images_.size()) {
    Rows rows = Lookup(job->images_[job->next_]->content_key);
    if (rows == nullptr) break;
    job->media_[job->next_++].rows = std::move(rows);
  }
  if (job->next_ == job->images_.size()) return job;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    queue_.push_back(job);
    if (!encoder_thread_.joinable()) {
      encoder_thread_ = std::thread(&ImageInputs::EncoderLoop, this);
      pthread_setname_np(encoder_thread_.native_handle(), "strata-vision");
    }
  }
  queue_cv_.notify_one();
  return job;
}

void ImageInputs::EncoderLoop() {
  for (;;) {
    std::shared_ptr<ImageEncodeJob> job;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    while (!stopping_) {
      std::shared_ptr<const engine::PreparedImage> image;
      {
        std::lock_guard<std::mutex> lock(job->mu_);
        if (job->cancelled_ || job->next_ == job->images_.size()) break;
        image = job->images_[job->next_];
      }
      encoding_ = 1;
      Rows rows = Encode(*image).rows;  // the cache first: the same image may be queued twice
      encoding_ = 0;
      std::function<void()> wake;
      {
        std::lock_guard<std::mutex> lock(job->mu_);
        job->media_[job->next_++].rows = std::move(rows);
        if (job->next_ == job->images_.size()) wake = std::move(job->wake_);
      }
      job->done_cv_.notify_all();
      if (wake) wake();
    }
  }
}

ImageInputStats ImageInputs::stats() const {
  ImageInputStats out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = stats_;
  }
  out.images_encoding = encoding_;
  std::lock_guard<std::mutex> lock(queue_mu_);
  for (const auto& job : queue_) {
    std::lock_guard<std::mutex> job_lock(job->mu_);
    out.images_waiting += static_cast<int64_t>(job->images_.size() - job->next_);
  }
  return out;
}

std::vector<ImagePart> FindImageParts(const nlohmann::ordered_json& messages) {
  std::vector<ImagePart> parts;
  if (!messages.is_array()) return parts;
  for (size_t i = 0; i < messages.size(); ++i) {
    const auto& m = messages[i];
    if (!m.is_object() || !m.contains("content") || !m["content"].is_array()) continue;
    const auto& content = m["content"];
    for (size_t j = 0; j < content.size(); ++j) {
      const auto& part = content[j];
      if (!part.is_object() || part.value("type", "") != "image_url") continue;
      const auto& image = part.contains("image_url") ? part["image_url"] : nlohmann::ordered_json();
      const auto& url = image.is_object() && image.contains("url") ? image["url"] : image;
      if (!url.is_string()) continue;  // the parser refused it already
      parts.push_back({url.get<std::string>(),
                       absl::StrCat("messages[", i, "].content[", j, "].image_url.url")});
    }
  }
  return parts;
}

}  // namespace strata::frontend
