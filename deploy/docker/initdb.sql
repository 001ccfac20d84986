-- Roles and extension of a fresh PostgreSQL for compose.yaml (what
-- deploy/local/setup.sh does on a machine): mneme_owner owns the schema and
-- runs migrations, mneme_app is what the services log in as and gets its
-- privileges through mneme_service, so row-level security applies to it.
CREATE ROLE mneme_service NOLOGIN;
CREATE ROLE mneme_owner LOGIN PASSWORD 'mneme_owner';
CREATE ROLE mneme_app LOGIN PASSWORD 'mneme_app' IN ROLE mneme_service;
CREATE DATABASE mneme OWNER mneme_owner ENCODING 'UTF8' LC_COLLATE 'C.UTF-8' LC_CTYPE 'C.UTF-8' TEMPLATE template0;
\connect mneme
CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS btree_gin;
-- Lets the full-text and keyword indexes serve queries under row-level
-- security (migrations/V23__text_search_under_row_security.sql).
ALTER FUNCTION pg_catalog.ts_match_vq(tsvector, tsquery) LEAKPROOF;
ALTER FUNCTION pg_catalog.arrayoverlap(anyarray, anyarray) LEAKPROOF;
-- Per-statement figures for operators (`SELECT … FROM pg_stat_statements`);
-- compose.yaml preloads the library.
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
