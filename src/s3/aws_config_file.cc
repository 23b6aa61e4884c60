#include "s3/aws_config_file.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace shardstream::internal {
namespace {

std::string ReadText(const std::string& path) {
  if (path.empty()) return {};
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string HomeFile(const char* env, const char* rel) {
  std::string p = EnvVar(env);
  if (!p.empty()) {
    if (p.rfind("~/", 0) == 0 && !EnvVar("HOME").empty()) p = EnvVar("HOME") + p.substr(1);
    return p;
  }
  std::string home = EnvVar("HOME");
  return home.empty() ? std::string() : home + "/" + rel;
}

std::string NoTrailingSlash(std::string s) {
  while (!s.empty() && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

std::string EnvVar(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return {};
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

bool IsTrueSetting(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  return v == "true";
}

std::map<std::string, IniSection> ParseIni(const std::string& text) {
  std::map<std::string, IniSection> out;
  std::istringstream in(text);
  std::string raw, section, parent;
  bool have_section = false;
  while (std::getline(in, raw)) {
    std::string line = Trim(raw);
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    bool indented = raw[0] == ' ' || raw[0] == '\t';
    if (!indented && line.front() == '[' && line.back() == ']') {
      section = Trim(line.substr(1, line.size() - 2));
      have_section = true;
      parent.clear();
      out[section];
      continue;
    }
    size_t eq = line.find('=');
    if (!have_section || eq == std::string::npos) continue;
    std::string key = Trim(line.substr(0, eq));
    std::string value = Trim(line.substr(eq + 1));
    if (indented && !parent.empty()) {
      out[section][parent + "." + key] = value;
      continue;
    }
    // "s3 =" with nothing after it opens nested keys on the indented lines below.
    parent = value.empty() ? key : std::string();
    out[section][key] = value;
  }
  return out;
}

std::string AwsSharedFiles::ConfigPath() { return HomeFile("AWS_CONFIG_FILE", ".aws/config"); }
std::string AwsSharedFiles::CredentialsPath() {
  return HomeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
}

AwsSharedFiles AwsSharedFiles::Load() {
  AwsSharedFiles f;
  f.config_path = ConfigPath();
  f.credentials_path = CredentialsPath();
  f.config = ParseIni(ReadText(f.config_path));
  f.credentials = ParseIni(ReadText(f.credentials_path));
  for (const auto& [name, section] : f.config) {
    if (name == "default") {
      f.profiles["default"].insert(section.begin(), section.end());
    } else if (name.rfind("profile ", 0) == 0) {
      IniSection& into = f.profiles[name.substr(8)];
      for (const auto& [k, v] : section) into[k] = v;
    }
  }
  for (const auto& [name, section] : f.credentials) {
    IniSection& into = f.profiles[name];
    for (const auto& [k, v] : section) into[k] = v;
  }
  return f;
}

const IniSection* AwsSharedFiles::ConfigProfile(const std::string& profile) const {
  auto it = config.find("profile " + profile);
  if (it != config.end()) return &it->second;
  if (profile == "default") {
    it = config.find("default");
    if (it != config.end()) return &it->second;
  }
  return nullptr;
}

const IniSection* AwsSharedFiles::CredentialsProfile(const std::string& profile) const {
  auto it = credentials.find(profile);
  return it == credentials.end() ? nullptr : &it->second;
}

std::string AwsSharedFiles::ConfigValue(const std::string& profile, const std::string& key) const {
  auto p = profiles.find(profile);
  if (p == profiles.end()) return {};
  auto it = p->second.find(key);
  return it == p->second.end() ? std::string() : it->second;
}

std::string AwsSharedFiles::ServicesEndpoint(const std::string& profile,
                                             const std::string& service) const {
  std::string services = ConfigValue(profile, "services");
  if (services.empty()) return {};
  auto it = config.find("services " + services);
  if (it == config.end()) return {};
  auto ep = it->second.find(service + ".endpoint_url");
  return ep == it->second.end() ? std::string() : ep->second;
}

std::string ConfiguredEndpoint(const AwsSharedFiles& files, const std::string& profile,
                               const std::string& service) {
  if (IsTrueSetting(EnvVar("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"))) return {};
  std::string upper = service;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  std::string v = EnvVar(("AWS_ENDPOINT_URL_" + upper).c_str());
  if (v.empty()) v = files.ServicesEndpoint(profile, service);
  if (v.empty()) v = EnvVar("AWS_ENDPOINT_URL");
  if (v.empty()) v = files.ConfigValue(profile, "endpoint_url");
  return NoTrailingSlash(v);
}

std::string DefaultProfileName() {
  std::string p = EnvVar("AWS_PROFILE");
  return p.empty() ? "default" : p;
}

std::string ConfiguredRegion(const AwsSharedFiles& files, const std::string& profile) {
  std::string r = EnvVar("AWS_REGION");
  if (r.empty()) r = EnvVar("AWS_DEFAULT_REGION");
  if (r.empty()) r = files.ConfigValue(profile, "region");
  return r.empty() ? "us-east-1" : r;
}

}  // namespace shardstream::internal
