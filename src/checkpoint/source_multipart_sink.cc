// A MultipartSink over any writable Source: parts are staged as files under
// <root>/.multipart/<id>/ and concatenated into the target on Complete. It is
// how file:// remotes exercise the same parallel-part path as S3.
#include <nlohmann/json.hpp>

#include <random>
#include <sstream>

#include "checkpoint/internal.h"
#include "shardstream/checksum.h"
#include "shardstream/uploader.h"
#include "shardstream/url.h"

namespace shardstream {

MultipartSink::~MultipartSink() = default;

namespace {

class SourceMultipartSink final : public MultipartSink {
 public:
  SourceMultipartSink(std::shared_ptr<Source> source, std::string root)
      : source_(std::move(source)), root_(std::move(root)) {}

  Result<std::string> Create(const std::string& url) override {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    std::ostringstream id;
    id << std::hex << rng();
    std::string dir = Staging(id.str());
    SHARDSTREAM_RETURN_IF_ERROR(source_->CreateDir(dir));
    nlohmann::json target = {{"url", url}, {"initiated_unix_ms", internal::NowUnixMs()}};
    SHARDSTREAM_RETURN_IF_ERROR(WriteFileAtomic(*source_, JoinUrl(dir, "target"), target.dump()));
    return id.str();
  }

  Result<std::string> UploadPart(const std::string& url, const std::string& upload_id, int number,
                                 std::string_view data) override {
    SHARDSTREAM_RETURN_IF_ERROR(
        WriteFileAtomic(*source_, JoinUrl(Staging(upload_id), PartName(number)), data));
    return ChecksumOf(data);
  }

  Status Complete(const std::string& url, const std::string& upload_id,
                  const std::vector<std::string>& etags) override {
    std::string dir = Staging(upload_id);
    SHARDSTREAM_ASSIGN_OR_RETURN(auto out, source_->NewWritableFile(url));
    Status s;
    for (size_t i = 0; i < etags.size() && s.ok(); ++i) {
      auto part = ReadFileToString(*source_, JoinUrl(dir, PartName(static_cast<int>(i + 1))));
      if (!part.ok()) { s = part.status(); break; }
      if (ChecksumOf(*part) != etags[i]) {
        s = Status(StatusCode::kChecksum,
                   "multipart " + RedactUrl(url) + ": part " + std::to_string(i + 1) +
                       " does not match its ETag", RedactUrl(url));
        break;
      }
      s = out->Append(*part);
    }
    if (s.ok()) s = out->Sync();
    if (s.ok()) s = out->Close();
    if (!s.ok()) {
      (void)out->Abort();
      return s;
    }
    return RemoveStaging(dir);
  }

  Status Abort(const std::string& url, const std::string& upload_id) override {
    return RemoveStaging(Staging(upload_id));
  }

  Result<std::vector<Pending>> ListPending(const std::string& prefix) override {
    std::vector<Pending> out;
    auto entries = source_->List(JoinUrl(root_, ".multipart"));
    if (!entries.ok()) {
      if (entries.status().code() == StatusCode::kNotFound) return out;
      return entries.status();
    }
    for (const auto& e : *entries) {
      Pending p;
      p.upload_id = UrlBasename(e.url);
      auto text = ReadFileToString(*source_, JoinUrl(e.url, "target"));
      if (text.ok()) {
        auto j = nlohmann::json::parse(*text, nullptr, false);
        if (j.is_object()) {
          p.url = j.value("url", "");
          p.initiated_unix_ms = j.value("initiated_unix_ms", int64_t{0});
        }
      }
      // An upload killed before its target was written is stale whatever its
      // prefix: report it with time 0 so it is aborted.
      if (!p.url.empty() && p.url.rfind(prefix, 0) != 0) continue;
      out.push_back(std::move(p));
    }
    return out;
  }

 private:
  std::string Staging(const std::string& id) const {
    return JoinUrl(JoinUrl(root_, ".multipart"), id);
  }
  static std::string PartName(int number) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "part-%05d", number);
    return buf;
  }
  Status RemoveStaging(const std::string& dir) {
    auto entries = source_->List(dir);
    if (!entries.ok())
      return entries.status().code() == StatusCode::kNotFound ? Status::OK() : entries.status();
    for (const auto& e : *entries) SHARDSTREAM_RETURN_IF_ERROR(source_->Remove(e.url));
    return source_->RemoveDir(dir);
  }

  std::shared_ptr<Source> source_;
  std::string root_;
};

}  // namespace

std::shared_ptr<MultipartSink> NewSourceMultipartSink(std::shared_ptr<Source> source,
                                                      std::string root) {
  return std::make_shared<SourceMultipartSink>(std::move(source), std::move(root));
}

}  // namespace shardstream
