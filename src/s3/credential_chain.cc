// The default credential chain (see aws_credentials.h for the order) and the
// cache that refreshes temporary credentials before they expire.
#include <algorithm>
#include <cctype>
#include <ctime>
#include <functional>
#include <set>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "s3/aws_config_file.h"
#include "s3/credential_fetch.h"
#include "shardstream/aws_credentials.h"
#include "shardstream/url.h"

namespace shardstream {
namespace internal {
namespace {

using Clock = std::chrono::system_clock;
using Fetch = std::function<Result<AwsCredentials>()>;

Clock::duration Seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// Caches what `fetch` returns and fetches again before expiry, as botocore's
// RefreshableCredentials: from `refresh_before` ahead (advisory) one thread
// refreshes while the others go on with the current credentials, and a
// failure keeps them (tried again at most every kRetryAdvisory); from
// `required_before` ahead (mandatory) every caller waits for the refresh and
// a failure is its error. Credentials that live less than the advisory
// window get windows of half and a quarter of their lifetime, so short-lived
// ones are not fetched again at every call.
class RefreshingProvider final : public AwsCredentialProvider {
 public:
  RefreshingProvider(std::string source, Fetch fetch, double refresh_before,
                     double required_before)
      : source_(std::move(source)),
        fetch_(std::move(fetch)),
        refresh_before_(Seconds(refresh_before)),
        required_before_(Seconds(std::min(required_before, refresh_before))) {}

  Result<AwsCredentials> Get() override {
    const auto now = Clock::now();
    std::optional<AwsCredentials> kept;
    {
      MutexLock lock(&state_mu_);
      if (current_ && (!current_->expiration || now < advisory_at_)) return *current_;
      if (current_ && now < mandatory_at_) {
        if (now < next_advisory_) return *current_;
        kept = current_;
      }
    }
    if (kept) {
      // Advisory: one thread refreshes, nobody waits for it.
      if (!refresh_mu_.TryLock()) return *kept;
      {
        MutexLock lock(&state_mu_);
        next_advisory_ = now + kRetryAdvisory;
      }
      Result<AwsCredentials> fresh = Refresh();
      refresh_mu_.Unlock();
      if (fresh.ok()) return fresh;
      Log().warn("refreshing AWS credentials from {} failed; keeping the current ones, valid "
                 "until {}: {}",
                 source_, FormatIso8601(*kept->expiration), fresh.status().ToString());
      return *kept;
    }
    // Mandatory, or none yet: wait for the refresh (one at a time), unless
    // the thread before this one already did it.
    MutexLock refreshing(&refresh_mu_);
    {
      MutexLock lock(&state_mu_);
      if (current_ && (!current_->expiration || Clock::now() < mandatory_at_)) return *current_;
    }
    return Refresh();
  }

 private:
  static constexpr Clock::duration kRetryAdvisory = std::chrono::seconds(5);

  // Fetches and stores.
  Result<AwsCredentials> Refresh() REQUIRES(refresh_mu_) EXCLUDES(state_mu_) {
    const auto start = Clock::now();
    Result<AwsCredentials> fresh = fetch_();
    if (!fresh.ok()) return fresh.status();
    fresh->source = source_;
    Log().debug("AWS credentials from {}{}", source_,
                fresh->expiration ? ", valid until " + FormatIso8601(*fresh->expiration)
                                  : std::string());
    MutexLock lock(&state_mu_);
    current_ = *fresh;
    if (fresh->expiration) {
      const Clock::time_point exp = *fresh->expiration;
      const Clock::duration life = exp > start ? exp - start : Clock::duration::zero();
      const Clock::duration advisory = std::min(refresh_before_, life / 2);
      const Clock::duration mandatory = std::min(required_before_, life / 4);
      advisory_at_ = exp - advisory;
      mandatory_at_ = exp - mandatory;
    }
    next_advisory_ = Clock::time_point::min();
    return fresh;
  }

  const std::string source_;
  const Fetch fetch_;
  const Clock::duration refresh_before_;
  const Clock::duration required_before_;
  Mutex refresh_mu_;  // held by the thread fetching
  Mutex state_mu_;    // never held while fetching
  std::optional<AwsCredentials> current_ GUARDED_BY(state_mu_);
  Clock::time_point advisory_at_ GUARDED_BY(state_mu_);
  Clock::time_point mandatory_at_ GUARDED_BY(state_mu_);
  Clock::time_point next_advisory_ GUARDED_BY(state_mu_) = Clock::time_point::min();
};

class StaticProvider final : public AwsCredentialProvider {
 public:
  explicit StaticProvider(AwsCredentials c) : c_(std::move(c)) {}
  Result<AwsCredentials> Get() override { return c_; }

 private:
  const AwsCredentials c_;
};

// One source of the chain that applies here.
struct Candidate {
  std::string source;
  Fetch fetch;
  // Instance metadata: a failure ends the chain with "no credentials"
  // rather than as that source's error, as in the SDKs.
  bool soft = false;
};

// What the chain reads once per resolution.
struct Context {
  AwsCredentialOptions options;
  bool explicit_profile = false;
  std::string profile;
  AwsSharedFiles files;
  std::shared_ptr<HttpClient> sts_http;

  std::string Region(const std::string& p) const {
    return options.region.empty() ? ConfiguredRegion(files, p) : options.region;
  }
  std::string StsEndpoint(const std::string& p) const {
    std::string e = ConfiguredEndpoint(files, p, "sts");
    const std::string region = Region(p);
    const char* suffix = region.rfind("cn-", 0) == 0 ? ".amazonaws.com.cn" : ".amazonaws.com";
    return e.empty() ? "https://sts." + region + suffix : e;
  }
  // Instance metadata takes AWS_METADATA_SERVICE_TIMEOUT/_NUM_ATTEMPTS;
  // container credentials keep botocore's fixed 2 s and 3 attempts.
  MetadataSettings Metadata(double default_timeout, int default_attempts, bool use_env) const {
    MetadataSettings m;
    std::string t = use_env ? EnvVar("AWS_METADATA_SERVICE_TIMEOUT") : std::string();
    std::string a = use_env ? EnvVar("AWS_METADATA_SERVICE_NUM_ATTEMPTS") : std::string();
    m.timeout_s = options.metadata_timeout_s.value_or(t.empty() ? default_timeout
                                                                : std::atof(t.c_str()));
    m.attempts = options.metadata_attempts.value_or(a.empty() ? default_attempts
                                                              : std::atoi(a.c_str()));
    if (m.timeout_s <= 0) m.timeout_s = default_timeout;
    if (m.attempts <= 0) m.attempts = 1;
    return m;
  }
  std::string Value(const std::string& p, const std::string& key) const {
    return files.ConfigValue(p, key);
  }
};

using MaybeCandidate = Result<std::optional<Candidate>>;

// Long-term keys, as a source.
Candidate Fixed(AwsCredentials c) {
  std::string source = c.source;
  return Candidate{std::move(source), [c = std::move(c)] { return Result<AwsCredentials>(c); }};
}

// A source's fetch behind a cache of its own (an assumed role's source is
// asked at every refresh of the role, and may be temporary itself).
Fetch Cached(const Candidate& c, const Context& ctx) {
  auto cache = std::make_shared<RefreshingProvider>(c.source, c.fetch, ctx.options.refresh_before_s,
                                                    ctx.options.required_before_s);
  return [cache] { return cache->Get(); };
}

MaybeCandidate EnvironmentCandidate() {
  std::string ak = EnvVar("AWS_ACCESS_KEY_ID"), sk = EnvVar("AWS_SECRET_ACCESS_KEY");
  if (ak.empty() && sk.empty()) return std::optional<Candidate>();
  if (ak.empty() || sk.empty()) {
    return Status::Auth(std::string("environment: ") +
                        (ak.empty() ? "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not"
                                    : "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not"));
  }
  AwsCredentials c{ak, sk, EnvVar("AWS_SESSION_TOKEN"), std::nullopt, "environment"};
  std::string exp = EnvVar("AWS_CREDENTIAL_EXPIRATION");
  if (!exp.empty()) c.expiration = ParseIso8601Time(exp);
  return std::optional<Candidate>(Fixed(std::move(c)));
}

// Keys of a profile's section (credentials or config file); nullopt when it
// has none, an error when only one of the two is there.
Result<std::optional<AwsCredentials>> SectionKeys(const IniSection* s, const std::string& what) {
  if (!s) return std::optional<AwsCredentials>();
  auto get = [&](const char* k) {
    auto it = s->find(k);
    return it == s->end() ? std::string() : it->second;
  };
  std::string ak = get("aws_access_key_id"), sk = get("aws_secret_access_key");
  if (ak.empty() && sk.empty()) return std::optional<AwsCredentials>();
  if (ak.empty() || sk.empty()) {
    return Status::Auth(what + ": " + (ak.empty() ? "aws_access_key_id" : "aws_secret_access_key") +
                        " is missing");
  }
  return std::optional<AwsCredentials>(
      AwsCredentials{ak, sk, get("aws_session_token"), std::nullopt, what});
}

// The role session name: AWS_ROLE_SESSION_NAME first where the environment
// counts (web identity from the environment, as botocore), then the profile's.
std::string SessionName(const Context& ctx, const std::string& p, bool use_env) {
  std::string n = use_env ? EnvVar("AWS_ROLE_SESSION_NAME") : std::string();
  if (n.empty()) n = ctx.Value(p, "role_session_name");
  return n.empty() ? "shardstream-session-" + std::to_string(std::time(nullptr)) : n;
}

MaybeCandidate ProfileCredentials(const Context& ctx, const std::string& p,
                                  std::set<std::string>* visiting, bool for_source);
// Container credentials, or instance metadata (container=false).
MaybeCandidate MetadataCandidate(const Context& ctx, bool container);

// role_arn with source_profile or credential_source: STS AssumeRole.
MaybeCandidate AssumeRoleCandidate(const Context& ctx, const std::string& p,
                                   std::set<std::string>* visiting) {
  std::string role = ctx.Value(p, "role_arn");
  std::string source_profile = ctx.Value(p, "source_profile");
  std::string credential_source = ctx.Value(p, "credential_source");
  const std::string what = "profile '" + p + "' in " + ctx.files.config_path;
  if (role.empty() || (source_profile.empty() && credential_source.empty())) {
    if (!role.empty() && ctx.Value(p, "web_identity_token_file").empty()) {
      return Status::Config(what + ": role_arn needs source_profile, credential_source or "
                                   "web_identity_token_file");
    }
    return std::optional<Candidate>();
  }
  if (!source_profile.empty() && !credential_source.empty()) {
    return Status::Config(what + ": source_profile and credential_source are both set");
  }
  if (!ctx.Value(p, "mfa_serial").empty()) {
    return Status::Config(what + ": mfa_serial asks for a one-time code at every refresh, which "
                                 "an unattended job cannot give; use a role without MFA");
  }
  Fetch source_fetch;
  std::string source_name;
  if (!credential_source.empty()) {
    std::optional<Candidate> c;
    if (credential_source == "Environment") {
      SHARDSTREAM_ASSIGN_OR_RETURN(c, EnvironmentCandidate());
    } else if (credential_source == "Ec2InstanceMetadata" || credential_source == "EcsContainer") {
      SHARDSTREAM_ASSIGN_OR_RETURN(c, MetadataCandidate(ctx, credential_source == "EcsContainer"));
    } else {
      return Status::Config(what + ": credential_source '" + credential_source +
                            "' is not Environment, Ec2InstanceMetadata or EcsContainer");
    }
    if (!c) {
      return Status::Auth(what + ": credential_source " + credential_source +
                          " supplies no credentials here");
    }
    source_fetch = Cached(*c, ctx);
    source_name = c->source;
  } else {
    if (visiting->count(source_profile) && source_profile != p) {
      return Status::Config(what + ": source_profile '" + source_profile +
                            "' leads back to itself (a loop of source_profile)");
    }
    if (!ctx.files.HasProfile(source_profile)) {
      return Status::Config(what + ": source_profile '" + source_profile + "' is in neither " +
                            ctx.files.config_path + " nor " + ctx.files.credentials_path);
    }
    std::optional<Candidate> c;
    if (source_profile == p) {
      // A profile that is its own source uses its own keys.
      SHARDSTREAM_ASSIGN_OR_RETURN(
          auto keys, SectionKeys(ctx.files.CredentialsProfile(p),
                                 "profile '" + p + "' in " + ctx.files.credentials_path));
      if (keys) c = Fixed(*keys);
    } else {
      visiting->insert(p);
      SHARDSTREAM_ASSIGN_OR_RETURN(c, ProfileCredentials(ctx, source_profile, visiting, true));
      visiting->erase(p);
    }
    if (!c) {
      return Status::Auth(what + ": source_profile '" + source_profile + "' has no credentials");
    }
    source_fetch = Cached(*c, ctx);
    source_name = c->source;
  }
  StsRequest req;
  req.endpoint = ctx.StsEndpoint(p);
  req.region = ctx.Region(p);
  req.role_arn = role;
  req.session_name = SessionName(ctx, p, false);
  req.external_id = ctx.Value(p, "external_id");
  std::string duration = ctx.Value(p, "duration_seconds");
  if (!duration.empty()) req.duration_seconds = std::atoi(duration.c_str());
  auto http = ctx.sts_http;
  std::string source = "assume role " + role + " (profile '" + p + "', from " + source_name + ")";
  return std::optional<Candidate>(
      Candidate{source, [http, req, source_fetch]() -> Result<AwsCredentials> {
                  SHARDSTREAM_ASSIGN_OR_RETURN(AwsCredentials src, source_fetch());
                  return StsAssumeRole(*http, req, src);
                }});
}

MaybeCandidate WebIdentityCandidate(const Context& ctx, const std::string& p, bool use_env) {
  std::string token_file = use_env ? EnvVar("AWS_WEB_IDENTITY_TOKEN_FILE") : "";
  std::string role = use_env ? EnvVar("AWS_ROLE_ARN") : "";
  std::string origin = "AWS_WEB_IDENTITY_TOKEN_FILE";
  if (token_file.empty()) {
    token_file = ctx.Value(p, "web_identity_token_file");
    origin = "web_identity_token_file of profile '" + p + "'";
  }
  if (role.empty()) role = ctx.Value(p, "role_arn");
  if (token_file.empty()) return std::optional<Candidate>();
  if (role.empty()) {
    return Status::Config("web identity: " + origin +
                          " is set but no role is (AWS_ROLE_ARN or the profile's role_arn)");
  }
  StsRequest req;
  req.endpoint = ctx.StsEndpoint(p);
  req.region = ctx.Region(p);
  req.role_arn = role;
  req.session_name = SessionName(ctx, p, use_env);
  auto http = ctx.sts_http;
  return std::optional<Candidate>(
      Candidate{"web identity (role " + role + ")",
                [http, req, token_file] { return StsAssumeRoleWithWebIdentity(*http, req, token_file); }});
}

MaybeCandidate MetadataCandidate(const Context& ctx, bool container) {
  if (container) {
    SHARDSTREAM_ASSIGN_OR_RETURN(
        std::string url, ContainerCredentialsUrl(EnvVar("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"),
                                                 EnvVar("AWS_CONTAINER_CREDENTIALS_FULL_URI")));
    if (url.empty()) return std::optional<Candidate>();
    auto http = MetadataHttpClient(ctx.Metadata(2, 3, false));
    std::string token_file = EnvVar("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    std::string token = EnvVar("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    return std::optional<Candidate>(
        Candidate{"container credentials at " + RedactUrl(url),
                  [http, url, token_file, token] {
                    return FetchContainerCredentials(*http, url, token_file, token);
                  }});
  }
  if (IsTrueSetting(EnvVar("AWS_EC2_METADATA_DISABLED"))) return std::optional<Candidate>();
  std::string endpoint = EnvVar("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  if (endpoint.empty()) endpoint = ctx.Value(ctx.profile, "ec2_metadata_service_endpoint");
  if (endpoint.empty()) {
    std::string mode = EnvVar("AWS_EC2_METADATA_SERVICE_ENDPOINT_MODE");
    if (mode.empty()) mode = ctx.Value(ctx.profile, "ec2_metadata_service_endpoint_mode");
    std::transform(mode.begin(), mode.end(), mode.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    endpoint = mode == "ipv6" ? "http://[fd00:ec2::254]" : "http://169.254.169.254";
  }
  while (!endpoint.empty() && endpoint.back() == '/') endpoint.pop_back();
  bool v1_disabled = IsTrueSetting(EnvVar("AWS_EC2_METADATA_V1_DISABLED")) ||
                     IsTrueSetting(ctx.Value(ctx.profile, "ec2_metadata_v1_disabled"));
  auto http = MetadataHttpClient(ctx.Metadata(1, 1, true));
  Candidate c{"instance metadata at " + RedactUrl(endpoint),
              [http, endpoint, v1_disabled] {
                return FetchInstanceMetadata(*http, endpoint, v1_disabled);
              }};
  c.soft = true;
  return std::optional<Candidate>(std::move(c));
}

// A profile's own credentials, in the SDKs' order for a profile: assume role
// (only as a source: the chain tries it first anyway), web identity,
// credentials file, credential_process, config file.
MaybeCandidate ProfileCredentials(const Context& ctx, const std::string& p,
                                  std::set<std::string>* visiting, bool for_source) {
  if (for_source) {
    // As botocore resolves a source profile: its own keys first, its role
    // only when it has none.
    auto both = [](const IniSection* s) {
      return s && s->count("aws_access_key_id") && s->count("aws_secret_access_key");
    };
    const bool has_keys = both(ctx.files.CredentialsProfile(p)) || both(ctx.files.ConfigProfile(p));
    if (!has_keys) {
      SHARDSTREAM_ASSIGN_OR_RETURN(auto role, AssumeRoleCandidate(ctx, p, visiting));
      if (role) return role;
    }
    SHARDSTREAM_ASSIGN_OR_RETURN(auto web, WebIdentityCandidate(ctx, p, false));
    if (web) return web;
  }
  if (!ctx.Value(p, "sso_session").empty() || !ctx.Value(p, "sso_start_url").empty()) {
    // Where botocore's SSO provider stands: a browser login has no place in
    // a training job, so say what does.
    return Status::Config("profile '" + p + "' in " + ctx.files.config_path +
                          " uses IAM Identity Center (SSO), which needs an interactive login; "
                          "give the job another profile with credential_process = aws configure "
                          "export-credentials --profile " + p + " --format process, or a role");
  }
  const std::string in_creds = "profile '" + p + "' in " + ctx.files.credentials_path;
  SHARDSTREAM_ASSIGN_OR_RETURN(auto keys, SectionKeys(ctx.files.CredentialsProfile(p), in_creds));
  if (keys) return std::optional<Candidate>(Fixed(*keys));
  std::string process = ctx.Value(p, "credential_process");
  if (process.empty() && ctx.files.CredentialsProfile(p)) {
    auto it = ctx.files.CredentialsProfile(p)->find("credential_process");
    if (it != ctx.files.CredentialsProfile(p)->end()) process = it->second;
  }
  if (!process.empty()) {
    double timeout = ctx.options.process_timeout_s;
    std::string what = "profile '" + p + "'";
    return std::optional<Candidate>(
        Candidate{"credential_process of profile '" + p + "'", [process, what, timeout] {
                    return RunCredentialProcess(process, what, timeout);
                  }});
  }
  const std::string in_config = "profile '" + p + "' in " + ctx.files.config_path;
  SHARDSTREAM_ASSIGN_OR_RETURN(keys, SectionKeys(ctx.files.ConfigProfile(p), in_config));
  if (keys) return std::optional<Candidate>(Fixed(*keys));
  return std::optional<Candidate>();
}

// The chain: resolved on the first Get (and again after a failure, so a
// fixed environment is picked up), then the chosen source refreshes itself.
class ChainProvider final : public AwsCredentialProvider {
 public:
  explicit ChainProvider(AwsCredentialOptions options) : options_(std::move(options)) {}

  Result<AwsCredentials> Get() override {
    std::shared_ptr<AwsCredentialProvider> chosen;
    {
      MutexLock lock(&mu_);
      chosen = chosen_;
      if (!chosen) return Resolve();
    }
    return chosen->Get();
  }

 private:
  Result<AwsCredentials> Resolve() REQUIRES(mu_) {
    Context ctx;
    ctx.options = options_;
    ctx.explicit_profile = !options_.profile.empty();
    ctx.profile = ctx.explicit_profile ? options_.profile : DefaultProfileName();
    ctx.files = AwsSharedFiles::Load();
    ctx.sts_http = std::make_shared<HttpClient>(options_.http);
    const std::string& p = ctx.profile;
    if (p != "default" && !ctx.files.HasProfile(p)) {
      return Status::Config("AWS profile '" + p + "' (" +
                            (ctx.explicit_profile ? "S3Options::profile" : "AWS_PROFILE") +
                            ") is in neither " + ctx.files.config_path + " nor " +
                            ctx.files.credentials_path);
    }
    std::vector<std::function<MaybeCandidate()>> sources;
    if (!ctx.explicit_profile) sources.push_back([] { return EnvironmentCandidate(); });
    std::set<std::string> visiting;
    sources.push_back([&] { return AssumeRoleCandidate(ctx, p, &visiting); });
    sources.push_back([&] { return WebIdentityCandidate(ctx, p, !ctx.explicit_profile); });
    sources.push_back([&] { return ProfileCredentials(ctx, p, &visiting, false); });
    sources.push_back([&] { return MetadataCandidate(ctx, true); });
    sources.push_back([&] { return MetadataCandidate(ctx, false); });
    std::vector<std::string> tried;
    for (auto& make : sources) {
      SHARDSTREAM_ASSIGN_OR_RETURN(std::optional<Candidate> c, make());
      if (!c) continue;
      auto provider = std::make_shared<RefreshingProvider>(
          c->source, c->fetch, options_.refresh_before_s, options_.required_before_s);
      Result<AwsCredentials> got = provider->Get();
      if (got.ok()) {
        chosen_ = provider;
        return got;
      }
      if (!c->soft) return got.status();
      tried.push_back(got.status().message());
    }
    std::string msg =
        "no AWS credentials: none in the environment (AWS_ACCESS_KEY_ID), for profile '" + p +
        "' in " + ctx.files.credentials_path + " or " + ctx.files.config_path +
        ", from web identity (AWS_WEB_IDENTITY_TOKEN_FILE), containers "
        "(AWS_CONTAINER_CREDENTIALS_RELATIVE_URI/_FULL_URI) or instance metadata";
    msg += tried.empty() ? " (AWS_EC2_METADATA_DISABLED)" : " (" + tried.back() + ")";
    return Status::Auth(msg);
  }

  const AwsCredentialOptions options_;
  Mutex mu_;
  std::shared_ptr<AwsCredentialProvider> chosen_ GUARDED_BY(mu_);
};

}  // namespace
}  // namespace internal

std::shared_ptr<AwsCredentialProvider> DefaultAwsCredentialChain(AwsCredentialOptions options) {
  return std::make_shared<internal::ChainProvider>(std::move(options));
}

std::shared_ptr<AwsCredentialProvider> StaticAwsCredentials(AwsCredentials credentials) {
  if (credentials.source.empty()) credentials.source = "static";
  return std::make_shared<internal::StaticProvider>(std::move(credentials));
}

}  // namespace shardstream
