// Links the installed library and uses its public API end to end.
#include <shardstream/checksum.h>
#include <shardstream/source.h>
#include <shardstream/version.h>

#include <cstdio>

int main() {
  auto mem = shardstream::NewMemorySource();
  shardstream::Status s = shardstream::WriteFileAtomic(*mem, "mem://x/a", "hello");
  auto back = shardstream::ReadFileToString(*mem, "mem://x/a");
  if (!s.ok() || !back.ok() || *back != "hello") return 1;
  std::printf("shardstream %s %s\n", std::string(shardstream::Version()).c_str(),
              shardstream::ChecksumOf(*back).c_str());
  return 0;
}
