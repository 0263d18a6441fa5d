-- wrk script: every request a new event (bearer source, id from X-Request-Id).
counter = 0
wrk.method = "POST"
wrk.body = '{"object":"event","type":"bench","data":{"amount":100}}'
request = function()
  counter = counter + 1
  return wrk.format(nil, nil, {
    ["Content-Type"] = "application/json",
    ["Authorization"] = "Bearer bench-token",
    ["X-Request-Id"] = "evt-" .. id .. "-" .. counter,
  })
end
setup = function(thread) thread:set("id", math.random(1, 1e9)) end
