// Source defaults, the forwarding wrapper and whole-file helpers. (The
// scheme router behind DefaultSource() lives with the sources it routes to:
// sources/default_source.cc.)
#include "shardstream/source.h"

#include <random>
#include <sstream>

#include "shardstream/url.h"

namespace shardstream {

RandomAccessFile::~RandomAccessFile() = default;

Result<size_t> RandomAccessFile::ReadVAt(uint64_t offset, const ReadPiece* pieces, size_t n) {
  size_t done = 0;
  for (size_t i = 0; i < n; ++i) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, ReadAt(offset + done, pieces[i].len, pieces[i].data));
    done += got;
    if (got < pieces[i].len) break;  // the end of the file
  }
  return done;
}
Result<RandomAccessFile::View> RandomAccessFile::MapView() {
  return Status(StatusCode::kConfig, "mapping is not supported for " + url(), url());
}
void RandomAccessFile::CountViewBytes(uint64_t) {}
void RandomAccessFile::ReleaseView(uint64_t, uint64_t) {}
Result<uint64_t> RandomAccessFile::SizeNow() { return Size(); }
InputStream::~InputStream() = default;
Result<size_t> InputStream::ReadWithin(size_t, void*, std::chrono::microseconds) { return size_t{0}; }
WritableFile::~WritableFile() = default;
Status WritableFile::Preallocate(uint64_t) { return Status::OK(); }
Source::~Source() = default;

namespace {

Status Unsupported(const char* what, const std::string& url) {
  return Status(StatusCode::kConfig,
                std::string(what) + " is not supported for " + RedactUrl(url), RedactUrl(url));
}

// A sequential stream over a RandomAccessFile.
class RandomAccessStream final : public InputStream {
 public:
  RandomAccessStream(std::unique_ptr<RandomAccessFile> file, uint64_t offset)
      : file_(std::move(file)), pos_(offset) {
    auto size = file_->Size();
    if (size.ok()) size_ = *size;
  }
  const std::string& url() const override { return file_->url(); }
  Result<size_t> Read(size_t n, void* out) override {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, file_->ReadAt(pos_, n, out));
    pos_ += got;
    return got;
  }
  uint64_t position() const override { return pos_; }
  std::optional<uint64_t> size() const override { return size_; }

 private:
  std::unique_ptr<RandomAccessFile> file_;
  uint64_t pos_;
  std::optional<uint64_t> size_;
};

}  // namespace

Result<std::unique_ptr<InputStream>> Source::OpenInputStream(const std::string& url,
                                                             uint64_t offset) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto file, OpenRandomAccess(url));
  return std::unique_ptr<InputStream>(new RandomAccessStream(std::move(file), offset));
}
Result<std::unique_ptr<InputStream>> Source::OpenInputStreamWith(const std::string& url,
                                                                 const StreamOptions& options) {
  return OpenInputStream(url, options.offset);
}
Result<std::vector<FileInfo>> Source::List(const std::string& url) {
  return Unsupported("List", url);
}
Result<std::unique_ptr<WritableFile>> Source::NewWritableFile(const std::string& url) {
  return Unsupported("writing", url);
}
Status Source::Rename(const std::string& from, const std::string&) {
  return Unsupported("Rename", from);
}
Status Source::Remove(const std::string& url) { return Unsupported("Remove", url); }
Status Source::CreateDir(const std::string& url) { return Unsupported("CreateDir", url); }
Status Source::RemoveDir(const std::string& url) { return Unsupported("RemoveDir", url); }
Status Source::SyncDir(const std::string& url) { return Unsupported("SyncDir", url); }

Result<std::unique_ptr<RandomAccessFile>> SourceWrapper::OpenRandomAccess(const std::string& url) {
  return target_->OpenRandomAccess(url);
}
Result<std::unique_ptr<InputStream>> SourceWrapper::OpenInputStream(const std::string& url,
                                                                    uint64_t offset) {
  return target_->OpenInputStream(url, offset);
}
void Source::Prefetch(const std::string&) {}

void SourceWrapper::Prefetch(const std::string& url) { target_->Prefetch(url); }
Result<FileInfo> SourceWrapper::Stat(const std::string& url) { return target_->Stat(url); }
Result<std::vector<FileInfo>> SourceWrapper::List(const std::string& url) {
  return target_->List(url);
}
Result<std::unique_ptr<WritableFile>> SourceWrapper::NewWritableFile(const std::string& url) {
  return target_->NewWritableFile(url);
}
Status SourceWrapper::Rename(const std::string& from, const std::string& to) {
  return target_->Rename(from, to);
}
Status SourceWrapper::Remove(const std::string& url) { return target_->Remove(url); }
Status SourceWrapper::CreateDir(const std::string& url) { return target_->CreateDir(url); }
Status SourceWrapper::RemoveDir(const std::string& url) { return target_->RemoveDir(url); }
Status SourceWrapper::SyncDir(const std::string& url) { return target_->SyncDir(url); }

Result<std::string> ReadFileToString(Source& source, const std::string& url) {
  SHARDSTREAM_ASSIGN_OR_RETURN(auto in, source.OpenInputStream(url, 0));
  std::string out;
  if (auto size = in->size()) out.reserve(*size);
  char buf[1 << 16];
  while (true) {
    SHARDSTREAM_ASSIGN_OR_RETURN(size_t got, in->Read(sizeof(buf), buf));
    if (got == 0) break;
    out.append(buf, got);
  }
  return out;
}

Status WriteFileAtomic(Source& source, const std::string& url, std::string_view data) {
  if (WritesWholeObjects(url)) {
    // An object store shows the object only once its PUT completes: nothing to rename.
    SHARDSTREAM_ASSIGN_OR_RETURN(auto file, source.NewWritableFile(url));
    Status s = file->Append(data);
    if (s.ok()) s = file->Close();
    if (!s.ok()) (void)file->Abort();
    return s;
  }
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::ostringstream tmp;
  tmp << url << ".tmp." << std::hex << rng();
  SHARDSTREAM_ASSIGN_OR_RETURN(auto file, source.NewWritableFile(tmp.str()));
  Status s = file->Append(data);
  if (s.ok()) s = file->Sync();
  if (s.ok()) s = file->Close();
  if (s.ok()) s = source.Rename(tmp.str(), url);
  if (!s.ok()) {
    (void)file->Abort();
    (void)source.Remove(tmp.str());
    return s;
  }
  return source.SyncDir(UrlDirname(url));
}

}  // namespace shardstream
