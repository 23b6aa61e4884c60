#include "http/ca_bundle.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "support/test_util.h"

namespace shardstream::internal {
namespace {

using shardstream::testing::TempDir;

std::string Touch(const std::string& path) {
  std::ofstream(path) << "-----BEGIN CERTIFICATE-----\n";
  return path;
}

TEST(CaBundleTest, LibcurlsOwnBundleWinsWhenItExists) {
  TempDir dir;
  const std::string own = Touch(dir.path() + "/curl-default.crt");
  const std::string other = Touch(dir.path() + "/other.crt");
  EXPECT_EQ(FallbackCaBundle(own.c_str(), {other}), "");
}

TEST(CaBundleTest, TheFirstDistributionBundleThatExistsStandsInForAMissingDefault) {
  // The wheels' libcurl names Debian's path; on RHEL only /etc/pki/... exists.
  TempDir dir;
  const std::string missing = dir.path() + "/ssl/certs/ca-certificates.crt";
  const std::string rhel = Touch(dir.path() + "/tls-ca-bundle.pem");
  const std::string later = Touch(dir.path() + "/cert.pem");
  EXPECT_EQ(FallbackCaBundle(missing.c_str(), {dir.path() + "/absent.crt", rhel, later}), rhel);
  EXPECT_EQ(FallbackCaBundle(nullptr, {rhel, later}), rhel);
  EXPECT_EQ(FallbackCaBundle("", {later}), later);
  // A directory of that name is not a bundle.
  EXPECT_EQ(FallbackCaBundle(missing.c_str(), {dir.path(), later}), later);
}

TEST(CaBundleTest, NothingFoundLeavesTheChoiceToLibcurl) {
  TempDir dir;
  EXPECT_EQ(FallbackCaBundle((dir.path() + "/a").c_str(), {dir.path() + "/b"}), "");
}

TEST(CaBundleTest, KnownPathsCoverDebianAndRhel) {
  const auto& known = KnownCaBundles();
  EXPECT_EQ(known.front(), "/etc/ssl/certs/ca-certificates.crt");
  EXPECT_NE(std::find(known.begin(), known.end(), "/etc/pki/tls/certs/ca-bundle.crt"), known.end());
}

}  // namespace
}  // namespace shardstream::internal
