-- Recount a partitioned queue's in-flight jobs per partition from the in-flight lists that
-- took its jobs (wurk.partitions; the reaper runs it each sweep): repairs counts a killed
-- worker, a hand edit or a lost script reply left wrong.
--
-- KEYS[1]  the in-flight counts (HASH)   KEYS[2]  the holders (SET)
-- returns  the number of partitions with jobs in flight

return part_recount(KEYS[1], KEYS[2])
