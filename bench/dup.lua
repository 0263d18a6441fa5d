-- wrk script: every request the same event (the duplicate path).
wrk.method = "POST"
wrk.body = '{"object":"event","type":"bench","data":{"amount":100}}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer bench-token"
wrk.headers["X-Request-Id"] = "evt-the-same-one"
