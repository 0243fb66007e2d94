"""The results dataset: one schema, durable journals, crash-safe parquet merges.

Layout under a results directory ``<results>``::

    <results>/data/<compiler>-<compiler_version>/<library>-<library_version>.parquet
    <results>/journal/<session_id>.jsonl     rows appended the moment each test ends
    <results>/journal/<session_id>.lock      held (flock) for the whole life of the journal
    <results>/runs/<compiler>-<compiler_version>/<library>-<library_version>/<model>/
                                             what one model's run left behind

Every parquet file holds at most one row per ``model_id``. Rows reach the parquet files only
through :func:`~pytest_neuronsupport.dataset.merge.merge_journals`, which rewrites a file by
writing a temporary file in the same directory, fsyncing it and ``os.replace``-ing it over the
old one, under a lock on the hidden file ``.<file>.lock`` next to it. A ``kill -9`` at any
moment therefore leaves every parquet file complete (old or new version) and every appended row
in a journal that the next merge recovers.

Hidden names (a leading ``.``) are used for everything that is not a data file, so that
``pandas.read_parquet("<results>/data")`` and
:func:`~pytest_neuronsupport.dataset.files.read_dataset` skip them:

* temporary files: ``.<file>.<16 hex digits>.tmp``
* per-file locks: ``.<file>.lock``
* the lock of a whole-dataset upgrade: ``<results>/data/.upgrade.lock``

A row is a plain dict validated against the one schema
(:data:`~pytest_neuronsupport.dataset.support.SCHEMA`); keys outside it are extra columns, added
by users' hooks, stored after the schema's columns. Reading goes through the schema: columns
missing from an old file come back as nulls; columns unknown to it are dropped unless
``keep_extra`` is asked for, and always preserved when a file is rewritten, so an older writer
never destroys what a newer one recorded.

After a merge every data file has the same schema:
:data:`~pytest_neuronsupport.dataset.support.SCHEMA` (its metadata included), then the extra
columns of all the files with one type each, null where a file had none.
:func:`~pytest_neuronsupport.dataset.files.upgrade_dataset` rewrites the files that differ (an
older version's, or ones that lack another file's extra column), each atomically under its
lock; every merge ends with it, so a reader that takes one schema for the whole directory
(``datasets.load_dataset``, the Hugging Face viewer, duckdb, pandas) never meets a file whose
columns differ. When nothing differs it only reads each file's schema.

Modules (imports go one way: ``merge`` → ``journal``, ``store`` → ``durable``, ``layout``,
``support`` → ``table``):

* :mod:`~pytest_neuronsupport.dataset.table`: a table (folder, schema, key), row validation, rows
  as JSON and as arrow tables.
* :mod:`~pytest_neuronsupport.dataset.support`: the support table: its schema, column docs and
  result meanings (the training and performance tables: ``train``, ``perf``).
* :mod:`~pytest_neuronsupport.dataset.layout`: where pair files and run folders live.
* :mod:`~pytest_neuronsupport.dataset.durable`: fsyncs, locks, atomic writes, temp-file sweeps.
* :mod:`~pytest_neuronsupport.dataset.files`: reading files through the schema; upgrading them
  to one schema; ``find_row``.
* :mod:`~pytest_neuronsupport.dataset.journal`: the append-only journal of a session.
* :mod:`~pytest_neuronsupport.dataset.merge`: journals into parquet files, then the upgrade.
"""
