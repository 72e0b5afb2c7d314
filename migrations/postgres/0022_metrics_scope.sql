-- Operations (#48): tokens of scope `metrics` may only scrape `GET /metrics`.
ALTER TABLE api_tokens DROP CONSTRAINT api_tokens_scope_check;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_scope_check
    CHECK (scope IN ('read', 'write', 'sdk', 'agent', 'metrics'));
