-- A user's Hugging Face Hub token (`gpuctl hf link`), sealed with the
-- server's key and bound to the user: never shown back, given to the jobs
-- of recipes with `hf_token = true` as HF_TOKEN. `hub_user`: the name the
-- Hub gave for it when it was linked (NULL when the Hub did not answer).
CREATE TABLE hub_tokens (
    user_id   TEXT PRIMARY KEY REFERENCES users (id),
    sealed    TEXT NOT NULL,
    hub_user  TEXT,
    linked_at BIGINT NOT NULL
);
