-- Time of a decision: the Redis server's TIME in ms plus ARGV[1], an offset in ms that
-- is 0 outside tests. Tests only: ARGV[1] = '=<ms>' gives the time outright (a manual
-- clock), so a test can land exactly on a window or lease boundary.
local function now_ms(arg)
  local t
  if arg == '0' then
    t = redis.call('TIME')
    return t[1] * 1000 + math.floor(t[2] / 1000)
  end
  if string.byte(arg) == 61 then
    return tonumber(string.sub(arg, 2))
  end
  t = redis.call('TIME')
  return t[1] * 1000 + math.floor(t[2] / 1000) + tonumber(arg)
end

