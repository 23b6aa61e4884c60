// Just enough XML for S3 replies (ListObjectsV2, errors, multipart): the
// text of a tagged element, entities decoded, and escaping for request
// bodies. S3's XML is flat and machine-written, so no general parser.
// Thread-safety: pure functions.
#ifndef SHARDSTREAM_S3_S3_XML_H_
#define SHARDSTREAM_S3_S3_XML_H_

#include <string>
#include <string_view>

namespace shardstream::internal {

// The decoded text of the first <tag>...</tag> in xml at or after *pos (or
// 0), or "" when there is none; advances *pos past it.
std::string XmlText(std::string_view xml, std::string_view tag, size_t* pos = nullptr);
std::string XmlEscape(std::string_view s);

}  // namespace shardstream::internal

#endif  // SHARDSTREAM_S3_S3_XML_H_
