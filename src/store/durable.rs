//! The durable store: the in-memory [`Store`] kept on disk in one SQLite file.
//!
//! The in-memory store stays the index and the source of every answer, so
//! claim, heartbeat and result cost what they cost in memory, flat with the
//! number of stored jobs. Durability is write-through: every store call that
//! changes jobs, pairings or runners notes the rows it touched (by creation
//! number for jobs, by position for pairings and runners), and
//! [`Durable::flush`] writes exactly those rows in one transaction before the
//! call answers. An acknowledged enqueue, claim or result is therefore on
//! disk. [`Durable::open`] reads every row back into a fresh [`Store`],
//! rebuilding its indexes.
//!
//! * Payloads are on disk only sealed. A job whose at-rest seal is still to
//!   be made ([`crate::envelope::deferred`]) is sealed by its flush, inline,
//!   before the enqueue answers: the plaintext never reaches the file, and an
//!   acknowledged enqueue does not depend on the background thread.
//! * The file is opened in WAL mode with `locking_mode=EXCLUSIVE`: the first
//!   write takes a lock the process holds until it closes the file (or dies),
//!   so a second process opening the same file is refused with
//!   [`DurableError::Locked`] instead of sharing it.
//! * `synchronous=NORMAL` (the default) survives a killed process: a commit
//!   is in the WAL in the operating system's hands before the call answers.
//!   A power loss or kernel crash can lose the last commits (never corrupt the
//!   file); [`Sync::Full`] fsyncs every commit for that, at a cost per call.
//! * A number the file cannot keep: SQLite stores NaN as NULL, so a NaN
//!   time (only a NaN clock makes one) reads back as absent or NaN.

use std::fmt;
use std::path::Path;

use rusqlite::types::Value as SqlValue;
use rusqlite::{params, params_from_iter, Connection, Row, ToSql};

use super::out::CiphertextRef;
use super::{
    note_dependents, Ciphertext, Envelope, Interner, Job, JobRef, JobState, Lease, Store,
    StoreOptions,
};

/// How a commit reaches the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Sync {
    /// `synchronous=NORMAL`: durable across a killed process.
    #[default]
    Normal,
    /// `synchronous=FULL`: durable across a power loss too.
    Full,
}

/// Why the durable file could not be opened or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DurableError {
    /// Another process (or another store in this one) has the file open.
    #[error("the store file {0} is in use by another process (or another store in this one): one store owns a file")]
    Locked(String),
    /// The file is not a store this version can read.
    #[error("the store file is not readable: {0}")]
    Format(String),
    /// The file at the path is not a store's (another program's SQLite
    /// database, or not a database at all): refused before anything in it
    /// changed.
    #[error("the file {path} is not a byollm store ({why}); it was left as it is. Give MemoryStore({{ path }}) a file it created, or a path where none exists yet")]
    Foreign { path: String, why: String },
    /// SQLite refused (I/O error, disk full, not a database, …).
    #[error("the store file could not be written: {0}")]
    Sqlite(String),
    #[error("this store is closed")]
    Closed,
}

impl From<rusqlite::Error> for DurableError {
    fn from(error: rusqlite::Error) -> Self {
        DurableError::Sqlite(error.to_string())
    }
}

/// The schema version in `PRAGMA user_version`.
const VERSION: i64 = 1;

/// `PRAGMA application_id` of a store file ("bylm" in ASCII), written in the
/// file's header when the store first sets the file up. A file with another
/// application id is another program's, and is refused untouched.
pub(crate) const APPLICATION_ID: i64 = 0x6279_6C6D;

/// A store file's tables and their columns, in order. A file written before
/// the application id existed has no id (0), `user_version` 1 and exactly
/// these tables: that is how one is recognised as ours (and then given the
/// id); anything else without our id is refused.
const TABLES: [(&str, &[&str]); 3] = [
    (
        "jobs",
        &[
            "seq",
            "id",
            "kind",
            "env_type",
            "env",
            "env_recipient",
            "env_sender",
            "env_direction",
            "env_deadline",
            "size_class",
            "audience",
            "purpose",
            "owner",
            "audience_allow",
            "depends_on",
            "state",
            "lease_id",
            "lease_runner",
            "lease_expires",
            "completed_by",
            "created_at",
            "claimable_at",
            "ttl_ms",
            "deadline_at",
            "refused_by",
            "attempts",
            "outcome",
            "provenance",
            "provenance_runner",
            "updated_at",
            "cancel_order",
        ],
    ),
    ("pairings", &["hash", "seq", "record"]),
    ("runners", &["pos", "record"]),
];

const SCHEMA: &str = "
create table if not exists jobs (
  seq integer primary key,
  id text not null,
  kind text not null,
  env_type integer not null,
  env blob,
  env_recipient text,
  env_sender text,
  env_direction text,
  env_deadline real,
  size_class text not null,
  audience text not null,
  purpose text,
  owner text not null,
  audience_allow text,
  depends_on text,
  state text not null,
  lease_id text,
  lease_runner text,
  lease_expires real,
  completed_by text,
  created_at real,
  claimable_at real,
  ttl_ms real,
  deadline_at real,
  refused_by text,
  attempts real,
  outcome text,
  provenance text,
  provenance_runner text,
  updated_at real,
  cancel_order integer
);
create table if not exists pairings (hash text primary key, seq integer not null, record text not null);
create table if not exists runners (pos integer primary key, record text not null);
";

/// Beside [`SCHEMA`] (a file from before it gets it at open): the keyed
/// hash of the request source that started each pairing.
const SOURCES_SCHEMA: &str =
    "create table if not exists pairing_sources (hash text primary key, source text not null);";

/// The columns a job's later writes change (everything but its identity,
/// envelope and enqueue options, which are written once, at create).
const UPDATE_JOB: &str = "update jobs set
  state = ?2, lease_id = ?3, lease_runner = ?4, lease_expires = ?5, completed_by = ?6,
  claimable_at = ?7, refused_by = ?8, attempts = ?9, outcome = ?10, provenance = ?11,
  provenance_runner = ?12, updated_at = ?13, cancel_order = ?14
  where seq = ?1";

/// The whole row, in the table's column order: `UPDATE_JOB`'s ?1–?14 keep
/// their numbers, the columns written only at create are ?15–?31.
const UPSERT_JOB: &str = "insert or replace into jobs values
  (?1, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27, ?28, ?2, ?3, ?4, ?5, ?6,
   ?29, ?7, ?30, ?31, ?8, ?9, ?10, ?11, ?12, ?13, ?14)";

/// How an envelope is kept in `env_type` / `env`.
const ENV_SEALED_BYTES: i64 = 0;
const ENV_SEALED_TEXT: i64 = 1;
const ENV_RAW: i64 = 2;

/// The open file of a durable store.
pub(crate) struct Durable {
    conn: Option<Connection>,
}

impl fmt::Debug for Durable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Durable")
            .field("open", &self.conn.is_some())
            .finish()
    }
}

fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

impl Durable {
    /// Open (or create) the store file at `path` and read it into a store.
    pub(crate) fn open(
        path: &Path,
        options: StoreOptions,
        sync: Sync,
    ) -> Result<(Durable, Store), DurableError> {
        let shown = path.display().to_string();
        let locked = |error: rusqlite::Error| {
            if is_busy(&error) {
                DurableError::Locked(shown.clone())
            } else {
                DurableError::from(error)
            }
        };
        create_private(path);
        let conn = Connection::open(path)?;
        // Exclusive before WAL: the WAL index then lives in this process's
        // memory, and the locks taken from the first read on are kept.
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
            .map_err(locked)?;
        // Whose file it is, before anything is written to it (the WAL switch
        // below writes its header).
        let without_id = match identify(&conn).map_err(locked)? {
            Identity::Ours { version } if version > VERSION => {
                return Err(DurableError::Format(format!(
                    "{shown} was written by a newer version (schema {version}, this one reads {VERSION})"
                )))
            }
            Identity::Ours { .. } => false,
            Identity::OursWithoutId => true,
            Identity::Empty => {
                // The id first, so a file that got no further than this is
                // still known as ours at its next open.
                conn.pragma_update(None, "application_id", APPLICATION_ID)
                    .map_err(locked)?;
                false
            }
            Identity::Foreign(why) => {
                return Err(DurableError::Foreign { path: shown, why })
            }
        };
        make_private(path);
        let mode: String = conn
            .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
            .map_err(locked)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(DurableError::Sqlite(format!(
                "the file cannot use WAL mode (journal_mode is {mode})"
            )));
        }
        let synchronous = match sync {
            Sync::Normal => "NORMAL",
            Sync::Full => "FULL",
        };
        conn.pragma_update(None, "synchronous", synchronous)
            .map_err(locked)?;
        // A checkpoint (copying the WAL into the file) fsyncs both; every
        // 10,000 pages (≈ 40 MB of WAL) rather than SQLite's 1,000 makes
        // that cost a tenth per commit, for a larger WAL to replay at open.
        conn.pragma_update(None, "wal_autocheckpoint", 10_000)
            .map_err(locked)?;
        // Take the write lock now, so a second owner is refused at open
        // rather than at its first write.
        conn.execute_batch("begin immediate").map_err(locked)?;
        conn.execute_batch(SCHEMA)?;
        conn.execute_batch(SOURCES_SCHEMA)?;
        if without_id {
            conn.pragma_update(None, "application_id", APPLICATION_ID)?;
        }
        conn.pragma_update(None, "user_version", VERSION)?;
        conn.execute_batch("commit")?;

        let mut store = Store::new(options);
        // Pairings note their writes while they load: one pruned as it is
        // read back (expired since) is then deleted from the file too.
        store.people.changes = Some(Default::default());
        load(&conn, &mut store)?;
        store.changes = Some(Default::default());
        Ok((Durable { conn: Some(conn) }, store))
    }

    /// Write the rows `store` changed since the last flush, in one
    /// transaction. On an error the changes are kept for the next flush.
    pub(crate) fn flush(&mut self, store: &mut Store) -> Result<(), DurableError> {
        let pending_jobs = store
            .changes
            .as_ref()
            .is_some_and(|c| !c.written.is_empty() || !c.dropped.is_empty());
        let pending_people = store
            .people
            .changes
            .as_ref()
            .is_some_and(|(p, r)| !p.is_empty() || !r.is_empty());
        if !pending_jobs && !pending_people {
            return Ok(());
        }
        let Some(conn) = self.conn.as_mut() else {
            return Err(DurableError::Closed);
        };
        let mut changes = store.changes.take().unwrap_or_default();
        let (mut pairings, mut runners) = store.people.changes.take().unwrap_or_default();
        changes.written.sort_unstable();
        changes.written.dedup();
        pairings.sort_unstable();
        pairings.dedup();
        runners.sort_unstable();
        runners.dedup();
        let written = write(conn, store, &changes, &pairings, &runners);
        match written {
            Ok(()) => {
                // Keep the buffers' capacity.
                changes.written.clear();
                changes.dropped.clear();
                pairings.clear();
                runners.clear();
                store.changes = Some(changes);
                store.people.changes = Some((pairings, runners));
                Ok(())
            }
            Err(error) => {
                store.changes = Some(changes);
                store.people.changes = Some((pairings, runners));
                Err(error)
            }
        }
    }

    /// Flush, then close the file (releasing the lock). Later flushes fail
    /// with [`DurableError::Closed`].
    pub(crate) fn close(&mut self, store: &mut Store) -> Result<(), DurableError> {
        if self.conn.is_none() {
            return Ok(());
        }
        self.flush(store)?;
        if let Some(conn) = self.conn.take() {
            conn.close()
                .map_err(|(_, error)| DurableError::from(error))?;
        }
        Ok(())
    }
}

/// What a file opened as a store turned out to be.
enum Identity {
    /// No pages yet (a new or empty file): set up as a store.
    Empty,
    /// A store's file, with its schema version.
    Ours { version: i64 },
    /// A store's file from before the application id was written (no id,
    /// version 1, exactly the store's tables): set up the id.
    OursWithoutId,
    /// Anything else, and why.
    Foreign(String),
}

/// Read (never write) what the file at the connection is.
fn identify(conn: &Connection) -> Result<Identity, rusqlite::Error> {
    let pages = match conn.query_row("pragma page_count", [], |row| row.get::<_, i64>(0)) {
        Ok(pages) => pages,
        Err(error) if error.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase) => {
            return Ok(Identity::Foreign("it is not a SQLite database".into()))
        }
        Err(error) => return Err(error),
    };
    if pages == 0 {
        return Ok(Identity::Empty);
    }
    let pragma =
        |name: &str| conn.query_row(&format!("pragma {name}"), [], |row| row.get::<_, i64>(0));
    let application_id = pragma("application_id")?;
    let version = pragma("user_version")?;
    if application_id == APPLICATION_ID {
        return Ok(Identity::Ours { version });
    }
    if application_id != 0 {
        return Ok(Identity::Foreign(format!(
            "its SQLite application_id is {application_id:#x}, a store's is {APPLICATION_ID:#x}"
        )));
    }
    let mut tables: Vec<String> = conn
        .prepare("select name from sqlite_master where type = 'table' order by name")?
        .query_map([], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    tables.retain(|t| !t.starts_with("sqlite_"));
    let ours = version == 1
        && tables.len() == TABLES.len()
        && TABLES.iter().all(|(table, columns)| {
            let found: Result<Vec<String>, _> = conn
                .prepare(&format!(
                    "select name from pragma_table_info('{table}') order by cid"
                ))
                .and_then(|mut s| s.query_map([], |row| row.get(0))?.collect());
            found.is_ok_and(|found| found == *columns)
        });
    if ours {
        return Ok(Identity::OursWithoutId);
    }
    Ok(Identity::Foreign(format!(
        "it has no byollm application_id, and its tables ({}) and user_version ({version}) are not a store's",
        if tables.is_empty() { "none".to_owned() } else { tables.join(", ") }
    )))
}

/// Create the file at `path` readable and writable by its owner only, when
/// there is none: SQLite then gives the WAL (and any other file it makes
/// beside the database) the database file's mode. Where this fails (a
/// missing directory), SQLite's own open reports it.
fn create_private(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path);
    }
    #[cfg(not(unix))]
    let _ = path;
}

/// A store's file, its WAL and shared-memory file made readable by their
/// owner only, where they are more open than that (a file of ours created
/// before the store made them private). Best effort: a file this process
/// does not own keeps its mode.
fn make_private(path: &Path) {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mut files = vec![path.to_path_buf()];
        for suffix in ["-wal", "-shm"] {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            files.push(name.into());
        }
        for file in files {
            if let Ok(meta) = std::fs::metadata(&file) {
                if meta.permissions().mode() & 0o077 != 0 {
                    let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600));
                }
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
}

fn write(
    conn: &mut Connection,
    store: &Store,
    changes: &super::Changes,
    pairings: &[String],
    runners: &[usize],
) -> Result<(), DurableError> {
    let tx = conn.transaction()?;
    {
        let mut delete = tx.prepare_cached("delete from jobs where seq = ?1")?;
        for &seq in &changes.dropped {
            delete.execute([seq as i64])?;
        }
        let mut upsert = tx.prepare_cached(UPSERT_JOB)?;
        let mut update = tx.prepare_cached(UPDATE_JOB)?;
        for &(seq, slot) in &changes.written {
            // Dropped (retention) or its slot reused since: nothing to keep.
            let Some(job) = store.live(JobRef { slot, seq }) else {
                continue;
            };
            // A stored job's later writes leave its envelope (the bulk of
            // the row) as it is; a new one is written whole.
            if update_job(&mut update, store, job)? == 0 {
                upsert_job(&mut upsert, store, job)?;
            }
        }
        let mut pairing =
            tx.prepare_cached("insert or replace into pairings values (?1, ?2, ?3)")?;
        let mut gone = tx.prepare_cached("delete from pairings where hash = ?1")?;
        // The keyed hash of the source that started it, beside it.
        let mut source =
            tx.prepare_cached("insert or replace into pairing_sources values (?1, ?2)")?;
        let mut no_source = tx.prepare_cached("delete from pairing_sources where hash = ?1")?;
        for hash in pairings {
            // Kept as the JSON text it was given; absent now: pruned.
            match store.people.pairing_row(hash) {
                Some((seq, json)) => pairing.execute(params![hash, seq as i64, json])?,
                None => gone.execute([hash])?,
            };
            match store.people.pairing_source(hash) {
                Some(from) => source.execute(params![hash, from])?,
                None => no_source.execute([hash])?,
            };
        }
        let mut runner = tx.prepare_cached("insert or replace into runners values (?1, ?2)")?;
        for &at in runners {
            if let Some(record) = store.people.runner_at(at) {
                runner.execute(params![at as i64, record])?;
            }
        }
    }
    tx.commit()?;
    Ok(())
}

fn list_json<S: AsRef<str>>(items: &[S]) -> Option<String> {
    if items.is_empty() {
        return None;
    }
    let items: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    serde_json::to_string(&items).ok()
}

/// An envelope's columns: `env_type`, `env`, the three key ids, `env_deadline`.
type EnvColumns<'a> = (
    i64,
    rusqlite::types::Value,
    Option<&'a str>,
    Option<&'a str>,
    Option<&'a str>,
    Option<f64>,
);

/// Hand `write` the values of the columns a job's state changes, numbered
/// as `UPDATE_JOB` numbers them (?1–?14).
fn with_changing_columns<R>(store: &Store, job: &Job, write: impl FnOnce(&[&dyn ToSql]) -> R) -> R {
    let name = |sym| store.syms.name(sym);
    let refused: Vec<&str> = job.refused_by.iter().map(|&s| name(s)).collect();
    let refused = list_json(&refused);
    let cancel = store.cancel_ids.get(&job.id).map(|&order| order as i64);
    let lease = job.lease.as_ref();
    write(params![
        job.seq as i64,
        job.state.as_str(),
        lease.map(|l| &*l.id),
        lease.map(|l| name(l.runner)),
        lease.map(|l| l.expires_at),
        job.completed_by_lease_id.as_deref(),
        job.claimable_at,
        refused,
        job.attempts,
        job.outcome.as_deref(),
        job.provenance.as_deref(),
        job.provenance_runner.as_deref(),
        job.updated_at,
        cancel,
    ])
}

/// Write the columns a job's state changes; the number of rows written (0:
/// the job is not in the file yet).
fn update_job(
    update: &mut rusqlite::CachedStatement<'_>,
    store: &Store,
    job: &Job,
) -> Result<usize, DurableError> {
    Ok(with_changing_columns(store, job, |changing| {
        update.execute(changing)
    })?)
}

fn upsert_job(
    upsert: &mut rusqlite::CachedStatement<'_>,
    store: &Store,
    job: &Job,
) -> Result<(), DurableError> {
    let name = |sym| store.syms.name(sym);
    // The envelope as it is at rest: sealed, or the caller's own JSON. A
    // seal still to be made is made now (never the plaintext on disk).
    let (env_type, env, recipient, sender, direction, deadline): EnvColumns<'_> =
        match (&job.envelope, store.sealed_view(&job.envelope)) {
            (_, Some((ciphertext, parts))) => {
                let (kind, value) = match ciphertext {
                    CiphertextRef::Bytes(bytes) => {
                        (ENV_SEALED_BYTES, SqlValue::Blob(bytes.to_vec()))
                    }
                    // A deferred seal's text, kept as bytes where it decodes.
                    CiphertextRef::Text(text) => match Ciphertext::new(text) {
                        Ciphertext::Bytes(bytes) => {
                            (ENV_SEALED_BYTES, SqlValue::Blob(bytes.into_vec()))
                        }
                        Ciphertext::Text(text) => {
                            (ENV_SEALED_TEXT, SqlValue::Text(text.into_string()))
                        }
                    },
                };
                (
                    kind,
                    value,
                    Some(parts.recipient_key_id),
                    Some(parts.sender_key_id),
                    Some(parts.direction),
                    Some(parts.deadline_at),
                )
            }
            (Envelope::Raw(json), None) => (
                ENV_RAW,
                SqlValue::Text(json.to_string()),
                None,
                None,
                None,
                None,
            ),
            // Only a deferred seal that failed has no view.
            (envelope, None) => {
                let error = match envelope {
                    Envelope::Deferred(deferred) => {
                        deferred.sealed().err().map(ToString::to_string)
                    }
                    _ => None,
                };
                let error = error.unwrap_or_default();
                return Err(DurableError::Sqlite(format!(
                    "the payload's at-rest seal failed: {error}"
                )));
            }
        };
    let audience_allow = job
        .audience_allow
        .as_deref()
        .map(|allow| serde_json::to_string(allow).unwrap_or_else(|_| "[]".into()));
    let created: &[&dyn ToSql] = params![
        &*job.id,
        name(job.kind),
        env_type,
        env,
        recipient,
        sender,
        direction,
        deadline,
        name(job.size_class),
        name(job.audience),
        job.purpose.as_deref(),
        name(job.owner),
        audience_allow,
        list_json(&job.depends_on),
        job.created_at,
        job.ttl_ms,
        job.deadline_at,
    ];
    with_changing_columns(store, job, |changing| {
        upsert.execute(params_from_iter(changing.iter().chain(created)))
    })?;
    Ok(())
}

fn strings(json: Option<String>) -> Result<Vec<String>, DurableError> {
    match json {
        None => Ok(Vec::new()),
        Some(text) => serde_json::from_str(&text)
            .map_err(|error| DurableError::Format(format!("a list column: {error}"))),
    }
}

/// A REAL column that is never absent; NULL is how SQLite keeps NaN.
fn real(row: &Row<'_>, at: usize) -> rusqlite::Result<f64> {
    Ok(row.get::<_, Option<f64>>(at)?.unwrap_or(f64::NAN))
}

/// One stored row as a job, its strings interned, and its place among the
/// pending cancel requests (`cancel_order`).
fn job_from(row: &Row<'_>, syms: &mut Interner) -> Result<(Job, Option<i64>), DurableError> {
    let text = |at: usize| row.get::<_, Option<String>>(at);
    let id: String = row.get(1)?;
    let state: String = row.get(15)?;
    let Some(state) = JobState::parse(&state) else {
        return Err(DurableError::Format(format!(
            "job {id} has an unknown state {state:?}"
        )));
    };
    let envelope = match (row.get::<_, i64>(3)?, row.get::<_, Option<SqlValue>>(4)?) {
        (ENV_RAW, Some(SqlValue::Text(json))) => Envelope::Raw(json.into()),
        (ENV_SEALED_BYTES | ENV_SEALED_TEXT, Some(env)) => Envelope::Sealed {
            ciphertext: match env {
                SqlValue::Blob(bytes) => Ciphertext::Bytes(bytes.into_boxed_slice()),
                SqlValue::Text(text) => Ciphertext::Text(text.into()),
                _ => return Err(DurableError::Format(format!("job {id}'s envelope"))),
            },
            recipient: syms.intern(text(5)?.as_deref().unwrap_or("")),
            sender: syms.intern(text(6)?.as_deref().unwrap_or("")),
            direction: syms.intern(text(7)?.as_deref().unwrap_or("")),
            deadline_at: real(row, 8)?,
        },
        _ => return Err(DurableError::Format(format!("job {id}'s envelope"))),
    };
    let lease = match (text(16)?, text(17)?) {
        (Some(id), Some(runner)) => Some(Lease {
            id: id.into(),
            runner: syms.intern(&runner),
            expires_at: real(row, 18)?,
        }),
        _ => None,
    };
    let audience_allow = match text(13)? {
        None => None,
        Some(text) => Some(strings(Some(text))?.into_boxed_slice()),
    };
    let job = Job {
        seq: row.get::<_, i64>(0)? as u64,
        id: id.into(),
        kind: syms.intern(&row.get::<_, String>(2)?),
        envelope,
        size_class: syms.intern(&row.get::<_, String>(9)?),
        audience: syms.intern(&row.get::<_, String>(10)?),
        purpose: text(11)?.map(Into::into),
        owner: syms.intern(&row.get::<_, String>(12)?),
        audience_allow,
        depends_on: strings(text(14)?)?
            .into_iter()
            .map(String::into_boxed_str)
            .collect(),
        state,
        lease,
        completed_by_lease_id: text(19)?.map(Into::into),
        created_at: real(row, 20)?,
        claimable_at: row.get(21)?,
        ttl_ms: real(row, 22)?,
        deadline_at: row.get(23)?,
        refused_by: strings(text(24)?)?.iter().map(|r| syms.intern(r)).collect(),
        attempts: real(row, 25)?,
        outcome: text(26)?.map(Into::into),
        provenance: text(27)?.map(Into::into),
        provenance_runner: text(28)?.map(Into::into),
        updated_at: real(row, 29)?,
    };
    Ok((job, row.get(30)?))
}

fn load(conn: &Connection, store: &mut Store) -> Result<(), DurableError> {
    let mut select = conn.prepare("select * from jobs order by seq")?;
    let mut rows = select.query([])?;
    while let Some(row) = rows.next()? {
        let (job, cancel_order) = job_from(row, &mut store.syms)?;
        let slot = store.slots.len() as u32;
        if store.by_id.contains_key(&job.id) {
            return Err(DurableError::Format(format!(
                "job {} is stored twice",
                job.id
            )));
        }
        if job.claimable_at.is_none() {
            // Still waiting on a dependency, found again when it completes.
            let r = JobRef { slot, seq: job.seq };
            note_dependents(&mut store.dependents, &job.depends_on, r);
        }
        if let Some(order) = cancel_order {
            let order = order as u64;
            store.cancel_ids.insert(job.id.clone(), order);
            store.cancel_order.insert(order, job.id.clone());
            store.next_cancel = store.next_cancel.max(order.saturating_add(1));
        }
        store.next_seq = store.next_seq.max(job.seq.saturating_add(1));
        store.by_id.insert(job.id.clone(), slot);
        let reach = store.reach(&job);
        store
            .idx
            .add(&job, slot, reach, store.options.retention_ms.is_some());
        store.slots.push(Some(job));
    }
    let mut pairings = conn.prepare(
        "select p.record, s.source from pairings p
           left join pairing_sources s on s.hash = p.hash order by p.seq",
    )?;
    let rows = pairings.query_map([], |row| {
        Ok((row.get::<_, String>(0)?, row.get::<_, Option<String>>(1)?))
    })?;
    for row in rows {
        let (text, source) = row?;
        if !store.people.load_pairing(text, source.as_deref()) {
            return Err(DurableError::Format("a pairing record".into()));
        }
    }
    let mut runners = conn.prepare("select record from runners order by pos")?;
    for text in runners.query_map([], |row| row.get::<_, String>(0))? {
        if !store.people.load_runner(text?) {
            return Err(DurableError::Format("a runner record".into()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{
        ClaimArgs, ClaimCapability, CompleteArgs, EnvelopeInput, Holder, JobInput, LeaseRef,
    };

    /// A fresh file path in a directory of its own under the system's temp
    /// directory, removed (with the file) when the guard is dropped.
    struct TempFile(std::path::PathBuf);

    impl TempFile {
        fn path(&self) -> std::path::PathBuf {
            self.0.join("store.db")
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn temp_path(name: &str) -> TempFile {
        let dir = std::env::temp_dir().join(format!(
            "byollm-durable-{}-{}-{}",
            name,
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        let _ = std::fs::create_dir_all(&dir);
        TempFile(dir)
    }

    fn options(retention: Option<f64>) -> StoreOptions {
        StoreOptions {
            default_ttl_ms: 1_000.0,
            retention_ms: retention,
        }
    }

    fn pairing(hash: &str, code: &str) -> crate::store::tests::Record {
        let mut record = crate::store::tests::Record::new();
        record.insert("deviceCodeHash".into(), hash.into());
        record.insert("userCode".into(), code.into());
        record.insert("state".into(), "pending".into());
        record.insert("expiresAt".into(), 1e12.into());
        record.insert("device".into(), serde_json::json!({"keyId": code}));
        record
    }

    /// Everything a reader can see of a store, as text.
    fn picture(store: &Store, runners: &[&str]) -> String {
        let mut out = store.jobs_json(&store.all_jobs());
        for runner in runners {
            out.push_str(&Store::lease_refs_json(&store.list_cancel_requests(runner)));
            out.push_str(&store.jobs_json(&store.list_claimed_by(runner)));
        }
        out.push_str(&store.people.list_runners(None));
        for code in ["C0", "C1", "C2"] {
            out.push_str(
                &serde_json::to_string(&store.people.pairing_by_code(code)).unwrap_or_default(),
            );
        }
        out
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    /// One random operation, applied the same way to `store`.
    fn step(store: &mut Store, rng: &mut Rng, op: u64, now: f64) {
        const RUNNERS: [(&str, &str); 3] = [("r0", "alice"), ("r1", "bob"), ("r2", "alice")];
        let caps = [ClaimCapability {
            kind: "llm.generate",
            backend_id: "b",
            offer_scope: "own",
        }];
        let (runner, owner) = RUNNERS[(op % 3) as usize];
        let job_id = format!("j{}", rng.below(40));
        match rng.below(9) {
            0 | 1 => {
                let dep = format!("j{}", rng.below(40));
                let depends = (rng.below(4) == 0).then(|| vec![dep]);
                let raw = rng.below(5) == 0;
                store.create(
                    JobInput {
                        id: &job_id,
                        kind: "llm.generate",
                        envelope: if raw {
                            EnvelopeInput::Raw("{\"odd\":[1,2]}")
                        } else {
                            EnvelopeInput::Sealed {
                                ciphertext: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",
                                recipient_key_id: "site",
                                sender_key_id: "site",
                                direction: "payload",
                                deadline_at: now + 5_000.0,
                            }
                        },
                        size_class: "small",
                        owner: if rng.below(2) == 0 { "alice" } else { "bob" },
                        audience: None,
                        purpose_json: (rng.below(2) == 0).then_some("{\"why\":\"test\"}"),
                        audience_allow: None,
                        depends_on: depends,
                        ttl_ms: None,
                        deadline_at: (rng.below(3) == 0).then_some(now + 700.0),
                    },
                    now,
                );
            }
            2 | 3 => {
                store.claim(&ClaimArgs {
                    runner_id: runner,
                    runner_owner: owner,
                    capabilities: &caps,
                    max: 2.0,
                    lease_ms: 300.0,
                    now,
                });
            }
            4 => {
                let held = store.list_claimed_by(runner);
                if let Some(&r) = held.first() {
                    let id = store.live(r).map(|j| j.id.to_string()).unwrap_or_default();
                    let tag = if rng.below(3) == 0 { "error" } else { "ok" };
                    store.complete(&CompleteArgs {
                        job_id: &id,
                        runner_id: runner,
                        holder: Holder::Runner(runner),
                        outcome_tag: tag,
                        outcome_json: "{\"outcome\":\"ok\",\"text\":\"hi\"}",
                        provenance_json: "{\"runnerId\":\"x\"}",
                        provenance_runner: Some(runner),
                        now,
                    });
                }
            }
            5 => {
                let held = store.list_claimed_by(runner);
                let leases: Vec<LeaseRef> = held
                    .iter()
                    .filter_map(|&r| {
                        let job = store.live(r)?;
                        Some(LeaseRef {
                            job_id: job.id.to_string(),
                            lease_id: job.lease.as_ref()?.id.to_string(),
                        })
                    })
                    .collect();
                if rng.below(2) == 0 {
                    store.release(runner, &leases, rng.below(2) == 0, now);
                } else {
                    store.renew_leases(runner, &leases, 300.0, now);
                }
            }
            6 => {
                store.cancel(&job_id, now);
            }
            7 => {
                store.expire_due(now);
            }
            _ => {
                let code = format!("C{}", rng.below(3));
                match rng.below(4) {
                    0 => store
                        .people
                        .create_pairing(pairing(&format!("h{code}"), &code)),
                    1 => {
                        let _ = store.people.approve(&code, owner, runner, now);
                    }
                    2 => {
                        store.people.touch(
                            runner,
                            r#"[{"kind":"llm.generate"}]"#,
                            "\"0.1.1\"",
                            now,
                        );
                    }
                    _ => store.people.consume(&format!("h{code}")),
                }
            }
        }
    }

    /// A durable store and a memory-only twin take the same random
    /// operations; the durable one is closed and reopened from its file
    /// every few operations, and must read the same as its twin after every
    /// one (jobs, leases, cancel requests, runners, pairings), and go on
    /// answering the same (its indexes rebuilt).
    fn agreement(seed: u64, retention: Option<f64>) {
        let temp = temp_path("agree");
        let path = temp.path();
        let (mut file, mut durable) =
            Durable::open(&path, options(retention), Sync::Normal).expect("open");
        durable.use_counter_lease_ids();
        let mut twin = Store::new(options(retention));
        twin.use_counter_lease_ids();
        let mut rng = Rng(seed);
        let runners = ["r0", "r1", "r2"];
        let mut now = 1_000.0;
        for op in 0..1_500u64 {
            now += (rng.below(120)) as f64;
            let state = rng.0;
            step(&mut durable, &mut rng, op, now);
            rng.0 = state;
            step(&mut twin, &mut rng, op, now);
            file.flush(&mut durable).expect("flush");
            if op % 37 == 36 {
                let counter = durable.counter_lease_ids;
                file.close(&mut durable).expect("close");
                let (f, d) =
                    Durable::open(&path, options(retention), Sync::Normal).expect("reopen");
                file = f;
                durable = d;
                durable.counter_lease_ids = counter;
            }
            assert_eq!(
                picture(&durable, &runners),
                picture(&twin, &runners),
                "seed {seed}, after operation {op}"
            );
        }
        // The run reached the states worth keeping: completed jobs and a paired runner.
        let seen = picture(&durable, &runners);
        assert!(seen.contains("\"revokedAt\""), "{seen}");
        assert!(retention.is_some() || seen.contains("\"ok\""), "{seen}");
        assert_eq!(integrity_check_open(&mut file), "ok");
    }

    fn integrity_check_open(file: &mut Durable) -> String {
        let Some(conn) = file.conn.as_ref() else {
            return "closed".into();
        };
        conn.query_row("pragma integrity_check", [], |row| row.get(0))
            .unwrap_or_else(|e| e.to_string())
    }

    #[test]
    fn reopened_store_reads_and_answers_as_its_memory_twin() {
        for seed in [1, 2, 3] {
            agreement(seed, None);
        }
    }

    #[test]
    fn reopened_store_with_retention_reads_as_its_memory_twin() {
        for seed in [4, 5] {
            agreement(seed, Some(400.0));
        }
    }

    #[test]
    fn retention_deletes_dropped_rows_from_the_file() {
        let temp = temp_path("retention");
        let path = temp.path();
        let (mut file, mut store) =
            Durable::open(&path, options(Some(10.0)), Sync::Normal).expect("open");
        let input = |id| JobInput {
            id,
            kind: "k",
            envelope: EnvelopeInput::Raw("{}"),
            size_class: "small",
            owner: "o",
            audience: None,
            purpose_json: None,
            audience_allow: None,
            depends_on: None,
            ttl_ms: Some(5.0),
            deadline_at: None,
        };
        store.create(input("a"), 0.0);
        store.create(input("b"), 0.0);
        file.flush(&mut store).expect("flush");
        store.expire_due(6.0); // both expire
        store.expire_due(100.0); // and are dropped
        file.flush(&mut store).expect("flush");
        let rows: i64 = file
            .conn
            .as_ref()
            .and_then(|c| {
                c.query_row("select count(*) from jobs", [], |r| r.get(0))
                    .ok()
            })
            .unwrap_or(-1);
        assert_eq!(rows, 0);
    }

    #[test]
    fn a_second_owner_is_refused_with_a_clear_error() {
        let temp = temp_path("lock");
        let path = temp.path();
        let (mut file, mut store) = Durable::open(&path, options(None), Sync::Full).expect("open");
        let second = Durable::open(&path, options(None), Sync::Normal);
        match second {
            Err(DurableError::Locked(shown)) => assert!(shown.contains("store.db")),
            other => panic!("expected Locked, got {:?}", other.map(|_| ())),
        }
        let message = DurableError::Locked("x.db".into()).to_string();
        assert!(message.contains("in use by another process"), "{message}");
        file.close(&mut store).expect("close");
        assert!(Durable::open(&path, options(None), Sync::Normal).is_ok());
    }

    #[test]
    fn a_closed_store_refuses_to_take_more_writes() {
        let temp = temp_path("closed");
        let path = temp.path();
        let (mut file, mut store) =
            Durable::open(&path, options(None), Sync::Normal).expect("open");
        file.close(&mut store).expect("close");
        store.people.create_pairing(pairing("h", "C0"));
        assert!(matches!(file.flush(&mut store), Err(DurableError::Closed)));
    }

    fn read(path: &Path) -> Vec<u8> {
        std::fs::read(path).unwrap_or_default()
    }

    fn wal_of(path: &Path) -> std::path::PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push("-wal");
        name.into()
    }

    /// A SQLite file written by `setup`, closed, and its bytes.
    fn sqlite_file(path: &Path, setup: &str) -> Vec<u8> {
        let conn = Connection::open(path).expect("open");
        conn.execute_batch(setup).expect("setup");
        drop(conn);
        read(path)
    }

    fn refused_untouched(path: &Path, before: &[u8]) -> String {
        let error = match Durable::open(path, options(None), Sync::Normal) {
            Err(error) => error,
            Ok(_) => panic!("opened a file that is not a store's"),
        };
        assert_eq!(read(path), before, "the file changed");
        assert!(!wal_of(path).exists(), "a WAL was made");
        let message = error.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        message
    }

    #[test]
    fn another_programs_sqlite_file_is_refused_before_anything_in_it_changes() {
        let temp = temp_path("foreign");
        let path = temp.path();
        let before = sqlite_file(
            &path,
            "create table notes (id integer primary key, text text); insert into notes values (1, 'mine'); pragma user_version = 7;",
        );
        let message = refused_untouched(&path, &before);
        assert!(message.contains("is not a byollm store"), "{message}");
        assert!(message.contains("notes"), "{message}");

        // Another program's application id, even with our tables.
        let temp = temp_path("foreign-id");
        let path = temp.path();
        let before = sqlite_file(
            &path,
            &format!("{SCHEMA} pragma application_id = 42; pragma user_version = 1;"),
        );
        let message = refused_untouched(&path, &before);
        assert!(message.contains("application_id is 0x2a"), "{message}");

        // Our tables and version without the id, plus one of someone else's.
        let temp = temp_path("foreign-extra");
        let path = temp.path();
        let before = sqlite_file(
            &path,
            &format!("{SCHEMA} create table extra (x); pragma user_version = 1;"),
        );
        refused_untouched(&path, &before);

        // Not a database at all.
        let temp = temp_path("garbage-untouched");
        let path = temp.path();
        let junk = b"this is not a database, only some text ... ".repeat(200);
        std::fs::write(&path, &junk).expect("write");
        let message = refused_untouched(&path, &junk);
        assert!(message.contains("not a SQLite database"), "{message}");
    }

    #[test]
    fn a_store_file_of_a_newer_version_is_refused_before_the_wal_switch() {
        let temp = temp_path("newer");
        let path = temp.path();
        let before = sqlite_file(
            &path,
            &format!("{SCHEMA} pragma application_id = {APPLICATION_ID}; pragma user_version = 2;"),
        );
        let error = Durable::open(&path, options(None), Sync::Normal).err();
        assert!(
            matches!(&error, Some(DurableError::Format(why)) if why.contains("newer version")),
            "{error:?}"
        );
        assert_eq!(read(&path), before);
        assert!(!wal_of(&path).exists());
    }

    #[test]
    fn a_store_file_from_before_the_application_id_opens_and_gets_it() {
        let temp = temp_path("before-id");
        let path = temp.path();
        // As the store wrote its files before: WAL, the tables, version 1.
        sqlite_file(
            &path,
            &format!(
                "pragma journal_mode = wal; {SCHEMA} pragma user_version = 1; insert into runners values (0, '{{\"id\":\"r0\",\"owner\":\"alice\",\"revokedAt\":null}}');"
            ),
        );
        let (mut file, mut store) =
            Durable::open(&path, options(None), Sync::Normal).expect("our older file opens");
        assert!(store
            .people
            .runner("r0")
            .is_some_and(|r| r.contains("alice")));
        file.close(&mut store).expect("close");
        let conn = Connection::open(&path).expect("open");
        let id: i64 = conn
            .query_row("pragma application_id", [], |row| row.get(0))
            .expect("read");
        assert_eq!(id, APPLICATION_ID);
    }

    #[test]
    fn a_new_store_file_carries_the_application_id() {
        let temp = temp_path("new-id");
        let path = temp.path();
        let (mut file, mut store) =
            Durable::open(&path, options(None), Sync::Normal).expect("open");
        file.close(&mut store).expect("close");
        let conn = Connection::open(&path).expect("open");
        let read = |name: &str| {
            conn.query_row(&format!("pragma {name}"), [], |row| row.get::<_, i64>(0))
                .unwrap_or(-1)
        };
        assert_eq!(
            (read("application_id"), read("user_version")),
            (APPLICATION_ID, VERSION)
        );
        drop(conn);
        // A file that got only its id (a crash before the tables) still opens.
        let temp = temp_path("only-id");
        let path = temp.path();
        sqlite_file(&path, &format!("pragma application_id = {APPLICATION_ID};"));
        assert!(Durable::open(&path, options(None), Sync::Normal).is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn the_store_file_and_its_wal_are_its_owners_alone() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| m.permissions().mode() & 0o777)
                .ok()
        };
        let temp = temp_path("modes");
        let path = temp.path();
        let (mut file, mut store) =
            Durable::open(&path, options(None), Sync::Normal).expect("open");
        store.people.create_pairing(pairing("h", "C0"));
        file.flush(&mut store).expect("flush");
        assert_eq!(mode(&path), Some(0o600));
        assert_eq!(
            mode(&wal_of(&path)),
            Some(0o600),
            "the WAL is made with the file's mode"
        );
        file.close(&mut store).expect("close");

        // A file of ours made before (world-readable) is made private at open.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let (mut file, mut store) =
            Durable::open(&path, options(None), Sync::Normal).expect("reopen");
        store.people.create_pairing(pairing("h2", "C1"));
        file.flush(&mut store).expect("flush");
        assert_eq!(mode(&path), Some(0o600));
        assert_eq!(mode(&wal_of(&path)), Some(0o600));
        file.close(&mut store).expect("close");
    }

    #[test]
    fn a_file_that_is_not_a_database_is_an_error_not_a_panic() {
        let temp = temp_path("garbage");
        let path = temp.path();
        std::fs::write(
            &path,
            b"this is not a database, only some text ... ".repeat(200),
        )
        .expect("write");
        let opened = Durable::open(&path, options(None), Sync::Normal);
        assert!(opened.is_err());
    }
}
