# Finds shardstream's dependencies and gives each one a target ss_dep::NAME, so
# the build and the installed package config use the same names. Debian 12
# ships CMake configs for some and only pkg-config files for others.
include(GNUInstallDirs)
include(CMakeFindDependencyMacro)
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

macro(_ss_pkg name module)
  if(NOT TARGET ss_dep::${name})
    pkg_check_modules(_ss_${name} REQUIRED IMPORTED_TARGET GLOBAL ${module})
    add_library(ss_dep::${name} ALIAS PkgConfig::_ss_${name})
  endif()
endmacro()

_ss_pkg(archive libarchive)
_ss_pkg(zstd libzstd)
_ss_pkg(xxhash libxxhash)
_ss_pkg(curl libcurl)
_ss_pkg(crypto libcrypto)  # SHA-256/HMAC for AWS SigV4
_ss_pkg(jpeg libjpeg)      # libjpeg-turbo: crop, skip and DCT-scaled decoding
_ss_pkg(spng spng)         # PNG, row by row
_ss_pkg(webp libwebp)

if(NOT TARGET ss_dep::json)
  find_package(nlohmann_json 3 REQUIRED)
  add_library(ss_dep::json INTERFACE IMPORTED GLOBAL)
  target_link_libraries(ss_dep::json INTERFACE nlohmann_json::nlohmann_json)
endif()
if(NOT TARGET ss_dep::spdlog)
  find_package(spdlog REQUIRED)
  add_library(ss_dep::spdlog INTERFACE IMPORTED GLOBAL)
  target_link_libraries(ss_dep::spdlog INTERFACE spdlog::spdlog)
endif()
if(NOT TARGET ss_dep::cli11 AND NOT SHARDSTREAM_DEPS_FOR_CONSUMER)
  find_package(CLI11 CONFIG QUIET)
  add_library(ss_dep::cli11 INTERFACE IMPORTED GLOBAL)
  if(TARGET CLI11::CLI11)
    target_link_libraries(ss_dep::cli11 INTERFACE CLI11::CLI11)
  endif()
endif()
