#include "rows/json_row.h"

#include <cstdint>

namespace shardstream::internal {
namespace {

// Deeper nesting is refused: the validator recurses once per level.
constexpr int kMaxDepth = 128;

class Scanner {
 public:
  explicit Scanner(std::string_view s) : begin_(s.data()), p_(s.data()), end_(s.data() + s.size()) {}

  bool Row(std::vector<JsonMember>* out) {
    out->clear();
    Ws();
    if (p_ == end_ || *p_ != '{') return Fail("a row must be a JSON object");
    ++p_;
    Ws();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      return End();
    }
    while (true) {
      Ws();
      if (p_ == end_ || *p_ != '"') return Fail("expected a key (a string)");
      JsonMember m;
      const char* k = p_ + 1;
      if (!String(&m.key_escaped)) return false;
      m.key = std::string_view(k, static_cast<size_t>(p_ - 1 - k));
      Ws();
      if (p_ == end_ || *p_ != ':') return Fail("expected ':' after a key");
      ++p_;
      Ws();
      const char* v = p_;
      if (!Value(0, &m.kind, &m.value_escaped)) return false;
      if (m.kind == JsonKind::kString) {
        m.value = std::string_view(v + 1, static_cast<size_t>(p_ - 1 - (v + 1)));
        m.value_at = static_cast<size_t>(v + 1 - begin_);
      } else {
        m.value = std::string_view(v, static_cast<size_t>(p_ - v));
        m.value_at = static_cast<size_t>(v - begin_);
      }
      out->push_back(m);
      Ws();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        continue;
      }
      if (p_ < end_ && *p_ == '}') {
        ++p_;
        return End();
      }
      return Fail("expected ',' or '}' in the row's object");
    }
  }

  const std::string& what() const { return what_; }
  size_t at() const { return at_; }

 private:
  bool End() {
    Ws();
    return p_ == end_ ? true : Fail("text after the row's object");
  }
  void Ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r' || *p_ == '\n')) ++p_;
  }
  bool Fail(const char* what) {
    what_ = what;
    at_ = static_cast<size_t>(p_ - begin_);
    return false;
  }
  static bool Hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  }
  // At '"': past the closing quote.
  bool String(bool* escaped) {
    ++p_;
    while (true) {
      while (p_ < end_ && *p_ != '"' && *p_ != '\\' && static_cast<unsigned char>(*p_) >= 0x20) ++p_;
      if (p_ == end_) return Fail("a string does not end");
      if (*p_ == '"') {
        ++p_;
        return true;
      }
      if (*p_ != '\\') return Fail("a control character inside a string");
      *escaped = true;
      if (++p_ == end_) return Fail("a string does not end");
      switch (*p_) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
          ++p_;
          break;
        case 'u':
          if (end_ - p_ < 5 || !Hex(p_[1]) || !Hex(p_[2]) || !Hex(p_[3]) || !Hex(p_[4]))
            return Fail("a \\u escape without four hex digits");
          p_ += 5;
          break;
        default:
          return Fail("an unknown escape in a string");
      }
    }
  }
  bool Digits() {
    const char* s = p_;
    while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    return p_ > s;
  }
  bool Number(JsonKind* kind) {
    *kind = JsonKind::kInteger;
    if (*p_ == '-') ++p_;
    if (p_ < end_ && *p_ == '0') {
      ++p_;
    } else if (!Digits()) {
      return Fail("not a JSON value");
    }
    if (p_ < end_ && *p_ == '.') {
      ++p_;
      *kind = JsonKind::kFloat;
      if (!Digits()) return Fail("a number without digits after its '.'");
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      *kind = JsonKind::kFloat;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!Digits()) return Fail("a number without digits in its exponent");
    }
    return true;
  }
  bool Literal(std::string_view word, JsonKind kind, JsonKind* out) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word)
      return Fail("not a JSON value");
    p_ += word.size();
    *out = kind;
    return true;
  }
  bool Value(int depth, JsonKind* kind, bool* escaped) {
    if (p_ == end_) return Fail("a value is missing");
    switch (*p_) {
      case '"':
        *kind = JsonKind::kString;
        return String(escaped);
      case 't': return Literal("true", JsonKind::kBool, kind);
      case 'f': return Literal("false", JsonKind::kBool, kind);
      case 'n': return Literal("null", JsonKind::kNull, kind);
      case '{': case '[': {
        if (depth >= kMaxDepth) return Fail("nested more than 128 levels deep");
        const bool object = *p_ == '{';
        *kind = object ? JsonKind::kObject : JsonKind::kArray;
        const char close = object ? '}' : ']';
        ++p_;
        Ws();
        if (p_ < end_ && *p_ == close) {
          ++p_;
          return true;
        }
        while (true) {
          Ws();
          bool unused = false;
          JsonKind k;
          if (object) {
            if (p_ == end_ || *p_ != '"') return Fail("expected a key (a string)");
            if (!String(&unused)) return false;
            Ws();
            if (p_ == end_ || *p_ != ':') return Fail("expected ':' after a key");
            ++p_;
            Ws();
          }
          if (!Value(depth + 1, &k, &unused)) return false;
          Ws();
          if (p_ < end_ && *p_ == ',') {
            ++p_;
            continue;
          }
          if (p_ < end_ && *p_ == close) {
            ++p_;
            return true;
          }
          return Fail(object ? "expected ',' or '}' in an object" : "expected ',' or ']' in an array");
        }
      }
      default:
        if (*p_ == '-' || (*p_ >= '0' && *p_ <= '9')) return Number(kind);
        return Fail("not a JSON value");
    }
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  std::string what_;
  size_t at_ = 0;
};

unsigned HexValue(const char* p) {
  unsigned v = 0;
  for (int i = 0; i < 4; ++i) {
    const char c = p[i];
    v = v * 16 + static_cast<unsigned>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
  }
  return v;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

bool ParseJsonRow(std::string_view line, std::vector<JsonMember>* members, std::string* what,
                  size_t* at) {
  Scanner s(line);
  if (s.Row(members)) return true;
  *what = s.what();
  *at = s.at();
  return false;
}

void UnescapeJson(std::string_view body, std::string* out) {
  for (size_t i = 0; i < body.size();) {
    const char c = body[i];
    if (c != '\\') {
      const size_t next = body.find('\\', i);
      const size_t n = (next == std::string_view::npos ? body.size() : next) - i;
      out->append(body.data() + i, n);
      i += n;
      continue;
    }
    const char e = body[i + 1];
    i += 2;
    switch (e) {
      case 'b': out->push_back('\b'); break;
      case 'f': out->push_back('\f'); break;
      case 'n': out->push_back('\n'); break;
      case 'r': out->push_back('\r'); break;
      case 't': out->push_back('\t'); break;
      case 'u': {
        uint32_t cp = HexValue(body.data() + i);
        i += 4;
        if (cp >= 0xD800 && cp < 0xDC00) {
          // A high surrogate: with its low half, one code point.
          if (i + 6 <= body.size() && body[i] == '\\' && body[i + 1] == 'u') {
            const uint32_t lo = HexValue(body.data() + i + 2);
            if (lo >= 0xDC00 && lo < 0xE000) {
              cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
              i += 6;
            } else {
              cp = 0xFFFD;
            }
          } else {
            cp = 0xFFFD;
          }
        } else if (cp >= 0xDC00 && cp < 0xE000) {
          cp = 0xFFFD;
        }
        AppendUtf8(cp, out);
        break;
      }
      default: out->push_back(e); break;  // '"', '\\', '/'
    }
  }
}

}  // namespace shardstream::internal
