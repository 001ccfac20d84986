-- V28: the HNSW graphs hold the embeddings in half precision.
--
-- A partition's graph was larger than the heap it indexes (187 MB against
-- 184 MB for a 100,000-memory tenant), and recall is fast only while the
-- graph, the heap and the GIN indexes all fit in shared buffers
-- (docs/SCALING.md, "Server settings"). A `halfvec` graph has the same
-- shape in 57% of the space (107 MB there): a search walks as many
-- elements, but they take half the memory to keep cached. Only the graph
-- walk uses the rounded vectors: the stored column stays `vector`, and the
-- similarity recall reports and ranks by is computed from it.
--
-- The index keeps its name. Every partition's graph is rebuilt here: 22 s
-- for 100,000 memories on 2 cores with maintenance_work_mem = 2GB; set it
-- before migrating a large database (docs/OPERATIONS.md).
DROP INDEX mneme.fragments_embedding_hnsw;
CREATE INDEX fragments_embedding_hnsw ON mneme.fragments
    USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops) WITH (m = 16, ef_construction = 64);
