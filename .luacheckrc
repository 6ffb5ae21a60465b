-- luacheck for the scripts Redis runs (src/lock/lua): Lua 5.1 with Redis's globals.
std = "lua51"
read_globals = {
  "KEYS",
  "ARGV",
  redis = { fields = { "call", "pcall", "error_reply", "status_reply", "sha1hex", "log", "LOG_WARNING" } },
}
max_line_length = 120
