"""The PostgreSQL store's schema: its tables, their migrations, and what a ``call_id`` names.

Schema v2 puts the caller and the call in the full-text index (see ``SCOPED_TSV``), so a
caller's search reads only their own matches.
"""

from __future__ import annotations

from loguru import logger

from pipecat_summarizer.store.base import (
    REQUIRED_TABLES,
    SCHEMA_VERSION,
    StoreError,
    check_store_tables,
    check_store_version,
)

LOCK_KEY = 0x5C_0A_11  # advisory lock for migrations
#: How long a migration's statement (and a second opener's wait for the migration's lock)
#: may take: v5 fills the word index from the whole archive (~30 s per 200,000 messages on a
#: loaded 2-core machine), past the pool's 30 s command timeout, which would roll it back.
MIGRATION_TIMEOUT_S = 3600.0

#: A caller's rows of ``removals`` (schema v8), for a caller ``{user}``: their bucket, the
#: first 12 bits of the ``md5`` of their id (4,096 buckets: the table names no caller, a
#: forgotten or purged one included; a delete of another caller of the bucket makes a search
#: count its words again, which is all it costs). A ``TRUNCATE`` of the messages bumps
#: ``EVERYONE``'s.
REMOVALS_OF = "left(md5({user}), 3)"
EVERYONE = "*"
#: What the full-text index holds (schema v2): the message's words plus a lexeme for its
#: caller and one for its call, so a caller's search finds only their own matches in the
#: index. No query word becomes one of these lexemes (they start with ``#``).
SCOPED_TSV = (
    "(tsv || array_to_tsvector(ARRAY['#u' || md5(COALESCE(user_id, '')), '#c' || md5(call_id)]))"
)
#: How much of a message the full-text index holds (schema v4): 100,000 characters are at
#: most 400 kB of UTF-8, whose tsvector stays under PostgreSQL's 1 MB limit.
TSV_CHARS = 100_000

#: What the caller's word index holds (schema v5), for a message ``{m}`` (``NEW`` in the
#: triggers; ``m`` of ``{source}`` when the migration fills it): a row per lexeme of its
#: ``tsv``, keyed by the caller (``md5`` as a UUID) and the lexeme, then the message's id,
#: with how many positions the lexeme has (``tf``) and the message's time. A search by
#: caller reads each query word's latest rows in the primary key's order, never the
#: caller's whole archive, and ranks them from ``tf`` alone (see
#: ``_postgres_search.caller_search_sql``). ``tf`` is negative when a position was clamped
#: to the tsvector's last one (16,383): two lexemes may share it there, and ``ts_rank_cd``
#: must read the row itself.
_WORDS_OF = (
    "SELECT md5({m}.user_id)::uuid, u.lexeme, {m}.id, "
    "(CASE WHEN 16383 = ANY(u.positions) THEN -1 ELSE 1 END) "
    "* COALESCE(cardinality(u.positions), 1), {m}.at "
    "FROM {source}unnest({m}.tsv) u"
)
_ADD_NEW = f"INSERT INTO message_words {_WORDS_OF.format(m='NEW', source='')}"

#: The word index's autovacuum settings (set when the store opens, see :func:`tune`): a
#: vacuum once this many rows were added, whatever the table's size. A search by caller
#: reads its words' latest rows with index-only scans, which fetch a row's heap tuple
#: unless its page is marked all-visible, and only a vacuum marks it; PostgreSQL's default
#: waits for 20% more rows (at 100,000 messages, the latest ~20,000), exactly the rows a
#: search reads first. Right after a bulk load (nothing all-visible) a new question's
#: statement took twice a vacuumed archive's server time at 100,000 messages (EXPLAIN
#: ANALYZE, 183 questions: median 6.8 vs 3.4 ms, p90 12.7 vs 6.4; load ~11). 5,000 rows are
#: ~700 messages.
#: How long setting them waits for the word index's lock when the store opens (then a
#: WARNING, and the next opening tries again).
TUNE_LOCK_TIMEOUT_MS = 1000
WORDS_AUTOVACUUM = {
    "autovacuum_vacuum_insert_threshold": "5000",
    "autovacuum_vacuum_insert_scale_factor": "0",
}


#: A purge's last statement (schema v8): each bucket's rows of ``removals`` folded into one
#: holding their sum, so a search's read stays short. Sums are unchanged (no count is read
#: again for it); rows added meanwhile by transactions not committed are left as they are.
FOLD_REMOVALS = """WITH gone AS (DELETE FROM removals RETURNING bucket, n)
    INSERT INTO removals SELECT bucket, sum(n) FROM gone GROUP BY bucket"""
#: The advisory lock a purge (or a forget, ``FOLD_BUCKETS``) tries before it folds: one fold
#: at a time (two at once would wait for each other's rows, and might deadlock); one that
#: finds it taken folds nothing.
FOLD_KEY = 0x5C_0A_12
#: A forget's fold (after the forget committed, in a transaction of its own at READ
#: COMMITTED, once ``pg_try_advisory_xact_lock(FOLD_KEY)`` answered true in an earlier
#: statement, so that this one's snapshot sees any fold committed before the lock was had;
#: since v9 run by ``removals_fold``, ``FOLD_FUNCTION``): the forgotten caller's bucket
#: (parameter 1: the caller) and ``EVERYONE``'s folded as ``FOLD_REMOVALS`` folds every
#: bucket, without a purge (S13-B-2: a fleet without ``retention_days`` never folded, a row
#: per forget). A bucket is folded only when it holds
#: more than one row: a one-row bucket has nothing to fold, and rewriting it would leave a
#: dead row for nothing. Not a larger threshold: a forget is rare and already vacuums five
#: tables; folding at two rows keeps a bucket's read at one or two rows whatever the fleet's
#: forgets, for a delete of two index entries and an insert of one.
FOLD_BUCKETS = f"""WITH many AS (SELECT bucket FROM removals
        WHERE bucket IN ({REMOVALS_OF.format(user="$1")}, '{EVERYONE}')
        GROUP BY bucket HAVING count(*) > 1),
    gone AS (DELETE FROM removals WHERE bucket IN (SELECT bucket FROM many)
        RETURNING bucket, n)
    INSERT INTO removals SELECT bucket, sum(n) FROM gone GROUP BY bucket"""
#: Migration 8's grants: each role's privileges on ``messages`` given on ``removals`` too (its
#: owner's aside). A role granted "ON ALL TABLES" before the upgrade (the application's,
#: where the owner migrates) was refused on ``removals`` by every search by caller, purge and
#: forget (S13-A-5): a search reads it, a delete's trigger adds to it, a purge folds it.
COPY_GRANTS = """DO $g$
    DECLARE g record;
    BEGIN
        FOR g IN SELECT DISTINCT a.grantee, a.privilege_type, a.is_grantable
            FROM pg_class c, aclexplode(c.relacl) a
            WHERE c.oid = 'messages'::regclass
                AND a.grantee <> (SELECT relowner FROM pg_class WHERE oid = 'removals'::regclass)
        LOOP
            EXECUTE format('GRANT %s ON removals TO %s%s', g.privilege_type,
                CASE WHEN g.grantee = 0 THEN 'PUBLIC'
                    ELSE quote_ident(pg_get_userbyid(g.grantee)) END,
                CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END $g$"""
#: Migration 8's trigger functions that write ``removals`` run with their owner's rights
#: (the migrating role, who owns ``removals``), with the schema's search path fixed: a role
#: that may delete messages but not insert anywhere (an erasure job granted SELECT, DELETE)
#: was refused on ``removals`` (S13-B-3).
DEFINER = """DO $d$
    DECLARE f text;
    BEGIN
        FOREACH f IN ARRAY ARRAY['messages_removed', 'messages_changed', 'message_words_clear',
                'removals_emptied'] LOOP
            EXECUTE format('ALTER FUNCTION %I() SECURITY DEFINER SET search_path = %I, pg_temp',
                f, current_schema());
        END LOOP;
    END $d$"""

#: Migration 9's trigger statement for a delete of messages (``message_words_drop``): the
#: deleted messages' word rows, by their whole key. Migration 5's form joined ``gone``,
#: ``unnest(g.tsv)`` and ``message_words`` in one join tree, and the planner joined the word
#: index to ``gone`` first, probing the primary key ``(scope, word, id)`` by scope alone (the
#: word joined above it): each deleted message read its caller's whole range, a forget of N
#: messages O(N x the caller's word rows) (S14-T-1: 12,000 messages 11-20 s, past the
#: statement timeout for a large caller: an erasure that fails). The keys are built first in
#: a ``MATERIALIZED`` CTE (PostgreSQL's documented fence: never folded into the outer join),
#: so the only join left is on all three columns; and the function runs with hash and merge
#: joins off (``DROP_WORDS_SETTINGS``), so that join is a probe of the primary key by its
#: whole key per deleted word row: linear in what is deleted, never in the table. With them
#: on, the planner (its estimate: 10 lexemes per message) read the whole word index in a
#: hash join once a delete reached ~0.5% of it (1.23M word rows: a forget of 3,000 messages
#: 4.3 s against 0.25 s by probes).
DROP_WORDS = """WITH d AS MATERIALIZED (
        SELECT md5(g.user_id)::uuid AS scope, u.lexeme AS word, g.id
        FROM gone g, unnest(g.tsv) u WHERE g.user_id IS NOT NULL)
    DELETE FROM message_words w USING d
    WHERE w.scope = d.scope AND w.word = d.word AND w.id = d.id"""
DROP_WORDS_SETTINGS = "SET enable_hashjoin = off SET enable_mergejoin = off"
#: Migration 9's per-row statement for an UPDATE of a message's content, caller or time
#: (``message_words_move``, an operator's redaction or move): the old row's word rows by one
#: index condition on the whole key (``word = ANY`` of its lexemes). Migration 5's join with
#: ``unnest(OLD.tsv)`` had the drop's shape (S14-T-1): a scan of the caller's range per row.
MOVE_WORDS = """DELETE FROM message_words w
    WHERE w.scope = md5(OLD.user_id)::uuid AND w.id = OLD.id
        AND w.word = ANY(tsvector_to_array(OLD.tsv))"""
#: Migration 9's fold function: ``FOLD_BUCKETS`` for a caller (its argument, ``$1`` in the
#: statement) with the owner's rights, so that every role that may forget folds after its
#: forget (S14-S-2: an erasure job granted SELECT and DELETE was refused ``removals``'
#: INSERT, and its forgets' rows stayed unfolded). It takes the try-lock itself: a role
#: granted EXECUTE folds only as the store does, one fold at a time, never waiting, and
#: only at READ COMMITTED (its fold statement, a new snapshot, then sees every fold
#: committed before the lock was had). Returns whether it folded. Every function and
#: operator its body calls matches ``pg_catalog``'s exactly, or is named there
#: (see ``REMOVALS_EMPTIED``).
FOLD_FUNCTION = f"""CREATE FUNCTION removals_fold(text) RETURNS boolean LANGUAGE plpgsql
    AS $f$
    BEGIN
        IF pg_catalog.current_setting('transaction_isolation') <> 'read committed'
                OR NOT pg_catalog.pg_try_advisory_xact_lock({FOLD_KEY}::int8) THEN
            RETURN false;
        END IF;
        {FOLD_BUCKETS};
        RETURN true;
    END $f$"""
#: What a ``SECURITY DEFINER`` body (run with its owner's rights) must keep to (S14-A-1): a
#: role that may create in the store's schema (``public``: PostgreSQL 14 and older let every
#: role) creates a function or operator there whose argument types match a call in the body
#: exactly where ``pg_catalog``'s needs an implicit cast, and PostgreSQL picks the exact
#: match whatever the search path's order: it runs with the owner's rights. So each call is
#: either named in ``pg_catalog`` or has an exact ``pg_catalog`` match (casts are never
#: looked up by path). Migration 9 rewrites the one v8 body that broke it:
#: ``removals_emptied`` compared a bigint with ``sum(bigint)`` (a numeric) and multiplied a
#: float by a bigint literal.
REMOVALS_EMPTIED = f"""CREATE OR REPLACE FUNCTION removals_emptied() RETURNS trigger
    LANGUAGE plpgsql AS $f$
    BEGIN
        IF TG_OP = 'DELETE' THEN  -- (no transition table for a TRUNCATE)
            IF NOT EXISTS (SELECT 1
                FROM (SELECT bucket, sum(n)::int8 AS n FROM gone GROUP BY bucket) g
                WHERE NOT EXISTS (SELECT 1 FROM removals r
                    WHERE r.bucket = g.bucket AND r.n = g.n)) THEN
                RETURN NULL;
            END IF;
        END IF;
        INSERT INTO removals VALUES ('{EVERYONE}',
            1 + pg_catalog.floor(pg_catalog.random() * 1099511627776::float8)::int8);
        RETURN NULL;
    END $f$"""
#: Migration 9's rights on the fold function: its owner's (``SECURITY DEFINER``, the search
#: path fixed to the schema), EXECUTE taken from ``PUBLIC`` (a function's default) and given
#: to each role that holds DELETE on ``messages`` (those that may forget), as migration 8
#: copies grants (``COPY_GRANTS``). A role granted DELETE later is given no EXECUTE: its
#: fold is refused and skipped (the next fold by a role that may folds its rows).
FOLD_FUNCTION_RIGHTS = """DO $g$
    DECLARE g record;
    BEGIN
        EXECUTE format('ALTER FUNCTION removals_fold(text) SECURITY DEFINER '
            'SET search_path = %I, pg_temp', current_schema());
        REVOKE EXECUTE ON FUNCTION removals_fold(text) FROM PUBLIC;
        FOR g IN SELECT DISTINCT a.grantee
            FROM pg_class c, aclexplode(c.relacl) a
            WHERE c.oid = 'messages'::regclass AND a.privilege_type = 'DELETE'
                AND a.grantee <> (SELECT proowner FROM pg_proc
                    WHERE oid = 'removals_fold(text)'::regprocedure)
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION removals_fold(text) TO %s',
                CASE WHEN g.grantee = 0 THEN 'PUBLIC'
                    ELSE quote_ident(pg_get_userbyid(g.grantee)) END);
        END LOOP;
    END $g$"""


def migrations(config: str) -> dict[int, list[str]]:
    """The statements of each schema version, for the text-search configuration ``config``
    (a name checked by the store: it is written into the SQL)."""
    return {
        1: [
            """CREATE TABLE calls(
                call_id TEXT PRIMARY KEY, user_id TEXT, started_at DOUBLE PRECISION NOT NULL,
                ended_at DOUBLE PRECISION, ended_by TEXT, summary TEXT,
                facts TEXT NOT NULL DEFAULT '[]',
                messages_in_context INTEGER NOT NULL DEFAULT 0,
                messages_archived INTEGER NOT NULL DEFAULT 0,
                compactions INTEGER NOT NULL DEFAULT 0, turns INTEGER NOT NULL DEFAULT 0,
                resumed BOOLEAN NOT NULL DEFAULT FALSE)""",
            "CREATE INDEX calls_user ON calls(user_id, started_at)",
            f"""CREATE TABLE messages(
                id BIGSERIAL PRIMARY KEY, call_id TEXT NOT NULL, user_id TEXT,
                position INTEGER NOT NULL, turn INTEGER NOT NULL, at DOUBLE PRECISION NOT NULL,
                role TEXT NOT NULL, content TEXT NOT NULL, message_json TEXT NOT NULL,
                tool_call_ids TEXT NOT NULL DEFAULT '[]', removed_by TEXT NOT NULL,
                compaction INTEGER, evicted_turn INTEGER,
                tsv tsvector GENERATED ALWAYS AS (to_tsvector('{config}', content)) STORED,
                UNIQUE(call_id, position))""",
            "CREATE INDEX messages_user ON messages(user_id, at)",
            "CREATE INDEX messages_at ON messages(at)",
            "CREATE INDEX messages_tsv ON messages USING GIN(tsv)",
            """CREATE TABLE compactions(
                call_id TEXT NOT NULL, attempt INTEGER NOT NULL, compaction INTEGER,
                ok BOOLEAN NOT NULL, reason TEXT NOT NULL, turn INTEGER NOT NULL,
                at DOUBLE PRECISION NOT NULL, messages_before INTEGER, messages_after INTEGER,
                messages_summarized INTEGER, tokens_before INTEGER, tokens_after INTEGER,
                summary TEXT, summary_sha256 TEXT, latency_s DOUBLE PRECISION, model TEXT,
                error TEXT, user_id TEXT, PRIMARY KEY(call_id, attempt))""",
            "CREATE INDEX compactions_user ON compactions(user_id, at)",
            """CREATE TABLE facts(
                call_id TEXT NOT NULL, seq INTEGER NOT NULL, user_id TEXT, key TEXT NOT NULL,
                action TEXT NOT NULL, text TEXT NOT NULL, fact_kind TEXT NOT NULL,
                source TEXT NOT NULL, actor TEXT NOT NULL, turn INTEGER NOT NULL,
                at DOUBLE PRECISION NOT NULL, PRIMARY KEY(call_id, seq))""",
            "CREATE INDEX facts_user ON facts(user_id, at)",
        ],
        # the caller and the call in the full-text index: see SCOPED_TSV
        2: [
            f"CREATE INDEX IF NOT EXISTS messages_scoped ON messages USING GIN({SCOPED_TSV})",
            "DROP INDEX IF EXISTS messages_tsv",
        ],
        # GIN's fast update parks new entries in a pending list that every search scans
        # whole (and that makes the planner shun the index) until a vacuum merges it: off,
        # so each insert updates the index itself (the writer is off the turn's path). The
        # list is merged once, and the index expression gets its statistics now (a v2
        # database's index was created on a table autovacuum may not analyze for long).
        3: [
            "ALTER INDEX messages_scoped SET (fastupdate = off)",
            "SELECT gin_clean_pending_list('messages_scoped')",
            "ANALYZE messages",
        ],
        # v4: as on SQLite (see sqlite.MIGRATIONS[4])
        4: [
            "ALTER TABLE calls ADD COLUMN label TEXT",
            "UPDATE calls SET label = call_id",
            "CREATE INDEX calls_label ON calls(label, started_at)",
            """CREATE TABLE caller_facts(
                user_id TEXT NOT NULL, key TEXT NOT NULL, action TEXT NOT NULL,
                text TEXT NOT NULL, fact_kind TEXT NOT NULL, source TEXT NOT NULL,
                at DOUBLE PRECISION NOT NULL, call_id TEXT NOT NULL, seq INTEGER NOT NULL)""",
            # a fact's key has no bound (a summary bullet without a topic is keyed by its
            # text): a B-tree entry holds at most about 2.7 kB, so the key is indexed by its
            # digest (a long key failed its insert, and the fact was set aside)
            "CREATE UNIQUE INDEX caller_facts_key ON caller_facts(user_id, md5(key))",
            """INSERT INTO caller_facts SELECT DISTINCT ON (user_id, key) user_id, key, action,
                text, fact_kind, source, at, call_id, seq FROM facts WHERE user_id IS NOT NULL
                ORDER BY user_id, key, at DESC, seq DESC""",
            "CREATE TABLE forgotten(user_hash TEXT PRIMARY KEY, at DOUBLE PRECISION NOT NULL)",
            # the full-text index holds a message's first TSV_CHARS characters: a tsvector
            # is at most 1 MB (a longer tool result failed its insert, and blocked the
            # writer); the message itself is stored whole
            "DROP INDEX IF EXISTS messages_scoped",
            "ALTER TABLE messages DROP COLUMN tsv",
            f"""ALTER TABLE messages ADD COLUMN tsv tsvector GENERATED ALWAYS AS
                (to_tsvector('{config}', left(content, {TSV_CHARS}))) STORED""",
            f"""CREATE INDEX messages_scoped ON messages USING GIN({SCOPED_TSV})
                WITH (fastupdate = off)""",
            "ANALYZE messages",
        ],
        # v5: the caller's word index (see WORDS_DOC): one row per (caller, lexeme,
        # message), kept by triggers, filled from the messages already there
        5: [
            """CREATE TABLE message_words(
                scope UUID NOT NULL, word TEXT NOT NULL, id BIGINT NOT NULL,
                tf SMALLINT NOT NULL, at DOUBLE PRECISION NOT NULL,
                PRIMARY KEY(scope, word, id) INCLUDE (tf, at))""",
            f"""CREATE FUNCTION message_words_add() RETURNS trigger LANGUAGE plpgsql AS $f$
                BEGIN
                    {_ADD_NEW};
                    RETURN NULL;
                END $f$""",
            """CREATE FUNCTION message_words_drop() RETURNS trigger LANGUAGE plpgsql AS $f$
                BEGIN
                    DELETE FROM message_words w USING gone g, unnest(g.tsv) u
                    WHERE g.user_id IS NOT NULL AND w.scope = md5(g.user_id)::uuid
                        AND w.word = u.lexeme AND w.id = g.id;
                    RETURN NULL;
                END $f$""",
            f"""CREATE FUNCTION message_words_move() RETURNS trigger LANGUAGE plpgsql AS $f$
                BEGIN
                    DELETE FROM message_words w USING unnest(OLD.tsv) u
                    WHERE OLD.user_id IS NOT NULL AND w.scope = md5(OLD.user_id)::uuid
                        AND w.word = u.lexeme AND w.id = OLD.id;
                    IF NEW.user_id IS NOT NULL THEN
                        {_ADD_NEW};
                    END IF;
                    RETURN NULL;
                END $f$""",
            """CREATE TRIGGER message_words_ai AFTER INSERT ON messages FOR EACH ROW
                WHEN (NEW.user_id IS NOT NULL) EXECUTE FUNCTION message_words_add()""",
            # one statement for a forget's or a purge's many rows
            """CREATE TRIGGER message_words_ad AFTER DELETE ON messages
                REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
                EXECUTE FUNCTION message_words_drop()""",
            # the writes' upsert sets neither column: it never fires this
            """CREATE TRIGGER message_words_au AFTER UPDATE OF content, user_id, at ON messages
                FOR EACH ROW EXECUTE FUNCTION message_words_move()""",
            f"""INSERT INTO message_words {_WORDS_OF.format(m="m", source="messages m, ")}
                WHERE m.user_id IS NOT NULL""",
            "ANALYZE message_words",
        ],
        # v6: TRUNCATE fires no row or DELETE trigger: an operator's TRUNCATE messages left
        # every word row, and once the ids were reused (RESTART IDENTITY, a restore) a
        # caller's search read the old rows as matches for the new messages
        6: [
            """CREATE FUNCTION message_words_clear() RETURNS trigger LANGUAGE plpgsql AS $f$
                BEGIN
                    TRUNCATE message_words;
                    RETURN NULL;
                END $f$""",
            """CREATE TRIGGER message_words_at AFTER TRUNCATE ON messages
                FOR EACH STATEMENT EXECUTE FUNCTION message_words_clear()""",
            # a v5 database truncated before this trigger: its word rows with no message go
            "DELETE FROM message_words w WHERE NOT EXISTS "
            "(SELECT 1 FROM messages m WHERE m.id = w.id)",
        ],
        7: [],  # v7 keeps SQLite's pending forgets only (see _sqlite_forget)
        # v8: the removals of each bucket of callers (REMOVALS_OF): how many statements
        # deleted messages of theirs (a purge's, a forget's, anyone's), counted by a trigger
        # in the deleting transaction (and a TRUNCATE's, under EVERYONE): a word count a
        # search keeps stands while their sum is unchanged
        # (``_postgres_search.caller_search_sql``). Rows are only added (an update would hold
        # the bucket's row, and every other delete of the bucket would wait for the deleting
        # transaction's end: S13-A-3, S13-A-6); a purge folds them (``FOLD_REMOVALS``), a
        # forget its caller's bucket once committed (``FOLD_BUCKETS``)
        8: [
            "CREATE TABLE removals(bucket TEXT NOT NULL, n BIGINT NOT NULL)",
            "CREATE INDEX removals_bucket ON removals(bucket) INCLUDE (n)",
            f"""CREATE FUNCTION messages_removed() RETURNS trigger LANGUAGE plpgsql AS $f$
                BEGIN
                    INSERT INTO removals SELECT DISTINCT {REMOVALS_OF.format(user="user_id")}, 1
                        FROM gone WHERE user_id IS NOT NULL;
                    RETURN NULL;
                END $f$""",
            """CREATE TRIGGER messages_removed AFTER DELETE ON messages
                REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
                EXECUTE FUNCTION messages_removed()""",
            f"""CREATE OR REPLACE FUNCTION message_words_clear() RETURNS trigger
                LANGUAGE plpgsql AS $f$
                BEGIN
                    TRUNCATE message_words;
                    INSERT INTO removals VALUES ('{EVERYONE}', 1);
                    RETURN NULL;
                END $f$""",
            # an UPDATE of what a search counts (an operator's redaction of content, a move
            # to another caller: S13-A-1) counts as everyone's removal: a statement trigger
            # with a column list has no transition table to name the callers by, and such
            # an UPDATE is rare. The writes' upsert sets none of these columns: never fires
            f"""CREATE FUNCTION messages_changed() RETURNS trigger LANGUAGE plpgsql AS $f$
                BEGIN
                    INSERT INTO removals VALUES ('{EVERYONE}', 1);
                    RETURN NULL;
                END $f$""",
            """CREATE TRIGGER messages_changed AFTER UPDATE OF content, user_id, at ON messages
                FOR EACH STATEMENT EXECUTE FUNCTION messages_changed()""",
            # rows of removals deleted but by a fold (which puts each bucket's sum back), or
            # the table truncated (an operator's "reset": S13-A-4): a sum restarting from
            # what is left would come back to a value a count was kept at. Everyone's
            # removals jump by a random amount (2**40 at most) instead
            f"""CREATE FUNCTION removals_emptied() RETURNS trigger LANGUAGE plpgsql AS $f$
                BEGIN
                    IF TG_OP = 'DELETE' THEN  -- (no transition table for a TRUNCATE)
                        IF NOT EXISTS (SELECT 1
                            FROM (SELECT bucket, sum(n) AS n FROM gone GROUP BY bucket) g
                            WHERE NOT EXISTS (SELECT 1 FROM removals r
                                WHERE r.bucket = g.bucket AND r.n = g.n)) THEN
                            RETURN NULL;
                        END IF;
                    END IF;
                    INSERT INTO removals
                        VALUES ('{EVERYONE}', 1 + floor(random() * 1099511627776)::int8);
                    RETURN NULL;
                END $f$""",
            """CREATE TRIGGER removals_deleted AFTER DELETE ON removals
                REFERENCING OLD TABLE AS gone FOR EACH STATEMENT
                EXECUTE FUNCTION removals_emptied()""",
            """CREATE TRIGGER removals_truncated AFTER TRUNCATE ON removals
                FOR EACH STATEMENT EXECUTE FUNCTION removals_emptied()""",
            DEFINER,
            COPY_GRANTS,
        ],
        # v9: a delete's or an update's word rows found by their whole key (DROP_WORDS,
        # MOVE_WORDS: S14-T-1, a forget's cost linear in its messages), and the fold any
        # role that may forget runs with the owner's rights (FOLD_FUNCTION: S14-S-2).
        # CREATE OR REPLACE keeps each trigger function's owner, rights and triggers
        9: [
            f"""CREATE OR REPLACE FUNCTION message_words_drop() RETURNS trigger
                LANGUAGE plpgsql {DROP_WORDS_SETTINGS} AS $f$
                BEGIN
                    {DROP_WORDS};
                    RETURN NULL;
                END $f$""",
            f"""CREATE OR REPLACE FUNCTION message_words_move() RETURNS trigger
                LANGUAGE plpgsql AS $f$
                BEGIN
                    IF OLD.user_id IS NOT NULL THEN
                        {MOVE_WORDS};
                    END IF;
                    IF NEW.user_id IS NOT NULL THEN
                        {_ADD_NEW};
                    END IF;
                    RETURN NULL;
                END $f$""",
            FOLD_FUNCTION,
            FOLD_FUNCTION_RIGHTS,
            # S14-A-1: see REMOVALS_EMPTIED; CREATE OR REPLACE resets SECURITY
            # DEFINER and the fixed search path: DEFINER sets them again (all four)
            REMOVALS_EMPTIED,
            DEFINER,
        ],
    }


async def migrate(conn, config: str) -> None:
    """Create the schema, or bring it to ``SCHEMA_VERSION``, in one transaction under an
    advisory lock (concurrent first uses migrate once)."""
    wait = MIGRATION_TIMEOUT_S  # not the pool's command timeout: see MIGRATION_TIMEOUT_S
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", LOCK_KEY, timeout=wait)
        # created only where missing: a role without CREATE on the schema (an application's
        # or an erasure job's least privilege) opens a current database (S14-A-2; CREATE
        # TABLE IF NOT EXISTS was refused it, the table there or not)
        if await conn.fetchval("SELECT to_regclass('schema_version') IS NULL"):
            await conn.execute("CREATE TABLE schema_version(version INTEGER NOT NULL)")
        version = await conn.fetchval("SELECT MAX(version) FROM schema_version") or 0
        if version > SCHEMA_VERSION:
            raise StoreError(f"database schema v{version} is newer than this code's")
        for v, statements in sorted(migrations(config).items()):
            if v > version:
                for statement in statements:
                    await conn.execute(statement, timeout=wait)
                await conn.execute("INSERT INTO schema_version VALUES ($1)", v)
        await tune(conn)


async def tune(conn) -> None:
    """Give the word index ``WORDS_AUTOVACUUM``'s settings where it has none of its own (an
    operator's value stays): no schema version, as nothing a reader relies on changes. A
    role that does not own the table cannot: the store works on, with a warning. Runs in
    :func:`migrate`'s transaction, under its lock."""
    options = await conn.fetchval(
        "SELECT reloptions FROM pg_class WHERE oid = to_regclass('message_words')"
    )
    have = {o.split("=", 1)[0] for o in options or ()}
    missing = {k: v for k, v in WORDS_AUTOVACUUM.items() if k not in have}
    if not missing:
        return
    settings = ", ".join(f"{k} = {v}" for k, v in missing.items())
    try:
        async with conn.transaction():  # a savepoint: a refusal leaves the migration whole
            # a VACUUM (a forget's, an operator's) holds the lock the ALTER needs: the
            # store opens on without the settings rather than wait for it
            await conn.execute(f"SET LOCAL lock_timeout = '{TUNE_LOCK_TIMEOUT_MS}ms'")
            await conn.execute(f"ALTER TABLE message_words SET ({settings})")
    except Exception as e:
        # not the owner (insufficient_privilege), or the table locked (lock_not_available)
        if getattr(e, "sqlstate", None) not in ("42501", "55P03"):
            raise
        logger.warning(f"message_words: autovacuum settings not set ({e}): {settings}")
    await conn.execute("SET LOCAL lock_timeout = DEFAULT")  # the savepoint kept a success's


async def check_read_only(conn, where: str) -> None:
    """Refuse a database that is not a memory store of this code's version (``where``
    names it in the error)."""
    names = {
        r[0]
        for r in await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
        )
    }
    # a PostgreSQL database may hold the application's tables too: only ours must be there
    check_store_tables(where, names, None)
    check_store_version(where, await conn.fetchval("SELECT MAX(version) FROM schema_version"))


#: SQL: the schemas of the connection's search path (``current_schemas``: those that exist
#: and the role may use, in the path's order) holding every table of ``$1`` (a store's
#: ``REQUIRED_TABLES``). Catalog reads only: no privilege on the tables is needed.
STORE_SCHEMAS = """SELECT s.name FROM pg_catalog.unnest(pg_catalog.current_schemas(false))
        WITH ORDINALITY AS s(name, i)
    WHERE (SELECT pg_catalog.count(*) FROM pg_catalog.pg_class c
            JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = s.name AND c.relname = ANY($1::text[])
                AND c.relkind IN ('r', 'p')) = pg_catalog.cardinality($1::text[])
    ORDER BY s.i"""

#: SQL: every schema of the database holding every table of ``$1``, on the path or not.
ANY_STORE_SCHEMAS = """SELECT n.nspname FROM pg_catalog.pg_namespace n
    WHERE (SELECT pg_catalog.count(*) FROM pg_catalog.pg_class c
            WHERE c.relnamespace = n.oid AND c.relname = ANY($1::text[])
                AND c.relkind IN ('r', 'p')) = pg_catalog.cardinality($1::text[])
    ORDER BY 1"""


async def store_schema(conn, where: str) -> str:
    """The schema the store lives in, for a connection of the store's role (``where`` names
    the database in errors): the one schema of its search path that holds a store's tables,
    or, for a new store, the schema it would create tables in (``current_schema()``). The
    store's connections are pinned to it (``create_pool``'s ``search_path``), so that what
    else the path finds first never decides where the store is read, migrated or forgotten
    (S15-S-1: PostgreSQL's default path is ``"$user", public``; a schema named after the
    role, created later by an operator for anything, came first).

    Raises:
        StoreError: If two schemas of the path hold a store (which one a forget must erase
            is not known), or the path holds no schema the role may use.
    """
    found = [r[0] for r in await conn.fetch(STORE_SCHEMAS, sorted(REQUIRED_TABLES))]
    if len(found) > 1:
        shown = ", ".join(repr(n[:63]) for n in found)
        raise StoreError(
            f"{where}: memory stores in several schemas of the search path ({shown}); "
            "name the store's in the DSN (?search_path=SCHEMA) or drop the other"
        )
    if found:
        return str(found[0])
    current = await conn.fetchval("SELECT pg_catalog.current_schema()")
    if current is None:
        raise StoreError(
            f"{where}: no schema on the search path that the role may use (to find the "
            "store in, or create it in)"
        )
    elsewhere = [r[0] for r in await conn.fetch(ANY_STORE_SCHEMAS, sorted(REQUIRED_TABLES))]
    if elsewhere:
        # a role that lost USAGE on the store's schema, or a DSN naming another schema,
        # would read (and forget in) a new, empty store: said once, at its opening
        shown = ", ".join(repr(n[:63]) for n in elsewhere[:5])
        logger.warning(
            f"{where}: no memory store on this role's search path (a new one goes in "
            f"{str(current)[:63]!r}), but the database holds one in {shown} (not on the path, "
            "or without USAGE on it): set the DSN's search_path to use that one"
        )
    return str(current)


def quoted_schema(schema: str) -> str:
    """``schema`` as a ``search_path`` value: one quoted identifier (``pg_catalog`` is searched
    first all the same, as it is whenever a path does not name it)."""
    return '"' + schema.replace('"', '""') + '"'


def session_key(n: int) -> str:
    """SQL naming the session a ``call_id`` argument (``$n``) names: a session's key, or
    else the newest session recorded under that application id (label), or else itself."""
    return (
        f"COALESCE((SELECT call_id FROM calls WHERE call_id = ${n}), (SELECT call_id FROM "
        f"calls WHERE label = ${n} ORDER BY started_at DESC LIMIT 1), ${n})"
    )
