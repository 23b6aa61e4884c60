// shardstream pack SRC_DIR OUT_DIR: files grouped by key (WebDataset rules)
// into deterministic tar shards plus manifest.jsonl.
#include <algorithm>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "shardstream/shard_writer.h"
#include "tools/command.h"
#include "tools/tar_tool_util.h"

namespace shardstream::tools {
namespace {

struct PackArgs {
  std::string src, out, shard_size = "512MiB", compress = "none", pattern;
  uint64_t max_samples = 0;
  int level = 3;
  bool index = false, json = false, overwrite = false;
  bool image_folder = false;  // SRC_DIR/<class>/<image>: .jpg etc. + .cls
};

// torchvision's ImageFolder extensions.
bool IsImageExtension(std::string ext) {
  for (char& c : ext) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* e : {"jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp"})
    if (ext == e) return true;
  return false;
}

int RunPack(const PackArgs& a) {
  namespace fs = std::filesystem;
  auto max_bytes = ParseByteSize(a.shard_size);
  if (!max_bytes.ok()) {
    std::cerr << "pack: " << max_bytes.status().message() << "\n";
    return 2;
  }
  ShardWriterOptions o;
  o.max_bytes = *max_bytes;
  o.max_samples = a.max_samples;
  o.pattern = a.pattern;
  o.zstd_level = a.level;
  o.write_index = a.index;
  o.overwrite = a.overwrite;
  if (a.compress == "zstd") {
    o.compression = ShardCompression::kZstd;
  } else if (a.compress != "none") {
    std::cerr << "pack: --compress takes zstd or none\n";
    return 2;
  }
  // Keys in sorted order; a key's files are its fields. Symlinks and other
  // non-regular files are not followed.
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> samples;
  uint64_t unkeyed = 0, not_regular = 0;
  std::map<std::string, int64_t> classes;  // --image-folder: class name -> label
  std::error_code ec;
  fs::recursive_directory_iterator it(a.src, fs::directory_options::none, ec), end;
  if (ec) {
    std::cerr << "pack: cannot read " << a.src << ": " << ec.message() << "\n";
    return 1;
  }
  for (; it != end; it.increment(ec)) {
    if (ec) {
      std::cerr << "pack: " << ec.message() << "\n";
      return 1;
    }
    const auto& entry = *it;
    if (entry.is_directory() && !entry.is_symlink()) continue;
    std::string rel = fs::relative(entry.path(), a.src).generic_string();
    if (entry.is_symlink() || !entry.is_regular_file()) {
      ++not_regular;
      continue;
    }
    if (a.image_folder) {
      // <class>/<name>.<ext>: the key is <class>/<name> (dots in the name
      // become '_', which the tar key rules need), the field the extension.
      const fs::path p(rel);
      const std::string ext = p.extension().string();
      if (std::distance(p.begin(), p.end()) != 2 || ext.size() < 2 ||
          !IsImageExtension(ext.substr(1))) {
        ++unkeyed;
        continue;
      }
      std::string stem = p.stem().string();
      std::replace(stem.begin(), stem.end(), '.', '_');
      std::string field = ext.substr(1);
      for (char& c : field) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      const std::string cls = p.begin()->string();
      classes.emplace(cls, 0);
      auto& files = samples[cls + "/" + stem];
      if (!files.empty()) {
        std::cerr << "pack: two images of one sample key " << cls << "/" << stem << " ("
                  << rel << "); rename one\n";
        return 1;
      }
      files.emplace_back(field, entry.path().string());
      continue;
    }
    std::string_view key, field;
    if (!SplitSampleKey(rel, &key, &field)) {
      ++unkeyed;
      continue;
    }
    samples[std::string(key)].emplace_back(std::string(field), entry.path().string());
  }
  if (a.image_folder) {
    if (classes.empty()) {
      std::cerr << "pack: --image-folder: no <class>/<image> files under " << a.src << "\n";
      return 1;
    }
    int64_t n = 0;
    for (auto& [name, index] : classes) index = n++;  // sorted names, as ImageFolder numbers them
  }
  if (unkeyed || not_regular)
    std::cerr << "pack: left out " << unkeyed << " files without a key.field name and "
              << not_regular << " symlinks or special files\n";

  auto writer = ShardWriter::Create(a.out, o);
  if (!writer.ok()) {
    std::cerr << "pack: " << writer.status() << "\n";
    return 1;
  }
  bool tty = ::isatty(STDERR_FILENO) && !a.json;
  auto last = std::chrono::steady_clock::now();
  uint64_t done = 0, bytes = 0;
  for (auto& [key, files] : samples) {
    std::vector<std::string> contents;
    contents.reserve(files.size());
    Sample s;
    s.key = key;
    for (auto& [field, path] : files) {
      auto data = ReadFileToString(*LocalSource(), path);
      if (!data.ok()) {
        std::cerr << "pack: " << data.status() << "\n";
        return 1;
      }
      contents.push_back(std::move(*data));
    }
    for (size_t i = 0; i < files.size(); ++i) {
      Field f;
      f.name = files[i].first;
      f.data = contents[i];
      bytes += contents[i].size();
      s.fields.push_back(std::move(f));
    }
    std::string label;
    if (a.image_folder) {
      label = std::to_string(classes.at(key.substr(0, key.find('/'))));
      Field f;
      f.name = "cls";
      f.data = label;
      s.fields.push_back(std::move(f));
    }
    if (Status st = (*writer)->Write(s); !st.ok()) {
      std::cerr << "pack: " << st << "\n";
      return 1;
    }
    ++done;
    auto now = std::chrono::steady_clock::now();
    if (tty && now - last > std::chrono::milliseconds(200)) {
      last = now;
      std::cerr << "\rpacked " << done << "/" << samples.size() << " samples, "
                << HumanBytes(bytes) << ", " << (*writer)->manifest().shards.size()
                << " shards done" << std::flush;
    }
  }
  if (Status st = (*writer)->Close(); !st.ok()) {
    std::cerr << (tty ? "\n" : "") << "pack: " << st << "\n";
    return 1;
  }
  if (tty) std::cerr << "\r\033[K";
  if (a.image_folder) {
    // The class names, one per line in label order, beside the manifest.
    std::string text;
    for (const auto& [name, index] : classes) text += name + "\n";
    if (Status st = WriteFileAtomic(*LocalSource(), a.out + "/classes.txt", text); !st.ok()) {
      std::cerr << "pack: " << st << "\n";
      return 1;
    }
  }
  const Manifest& m = (*writer)->manifest();
  uint64_t shard_bytes = 0;
  for (const ShardEntry& e : m.shards) shard_bytes += static_cast<uint64_t>(std::max<int64_t>(e.size, 0));
  if (a.json) {
    nlohmann::json j = {{"samples", done},
                        {"classes", classes.size()},
                        {"shards", m.shards.size()},
                        {"shard_bytes", shard_bytes},
                        {"payload_bytes", bytes},
                        {"unkeyed_files", unkeyed},
                        {"skipped_links", not_regular},
                        {"manifest", a.out + "/manifest.jsonl"}};
    std::cout << j.dump() << "\n";
  } else {
    std::cout << "packed " << done << (done == 1 ? " sample" : " samples") << " into "
              << m.shards.size() << (m.shards.size() == 1 ? " shard" : " shards") << " of "
              << FormatByteSize(shard_bytes) << " (fields " << FormatByteSize(bytes)
              << "); manifest " << a.out << "/manifest.jsonl\n";
  }
  return 0;
}

}  // namespace

SHARDSTREAM_COMMAND(pack, [](CLI::App& app) {
  auto args = std::make_shared<PackArgs>();
  auto* sub = app.add_subcommand(
      "pack", "Pack a directory of files into tar shards (files sharing a key form a sample)");
  sub->add_option("SRC_DIR", args->src, "Directory of files named <key>.<field>")
      ->required()
      ->check(CLI::ExistingDirectory);
  sub->add_option("OUT_DIR", args->out, "Output directory for shards and manifest.jsonl")
      ->required();
  sub->add_option("--shard-size", args->shard_size,
                  "Largest shard (tar bytes before compression), e.g. 512MiB")
      ->capture_default_str();
  sub->add_option("--max-samples", args->max_samples, "Most samples per shard (0: no limit)")
      ->capture_default_str();
  sub->add_option("--compress", args->compress, "none or zstd")->capture_default_str();
  sub->add_option("--level", args->level, "zstd level")->capture_default_str();
  sub->add_option("--pattern", args->pattern,
                  "Shard name pattern with one %d (default shard-%06d.tar[.zst])");
  sub->add_flag("--index", args->index, "Also write <shard>.idx sample indexes");
  sub->add_flag("--overwrite", args->overwrite,
                "Remove the shards, indexes and manifest OUT_DIR already holds (refused without)");
  sub->add_flag("--image-folder", args->image_folder,
                "SRC_DIR is an ImageFolder tree (<class>/<image>): each image becomes a sample "
                "with its image field and a .cls label (classes numbered in name order, listed "
                "in OUT_DIR/classes.txt)");
  sub->add_flag("--json", args->json, "Print the summary as JSON");
  sub->callback([args] { ExitWith(RunPack(*args)); });
});

}  // namespace shardstream::tools
