//! The example, run twice on one database as two runs of the program would: the second run
//! remembers what the first was told.

#[path = "../examples/remember.rs"]
#[allow(dead_code)]
mod example;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_second_run_remembers_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/memory.db", dir.path().display());

    let before = example::run(&url, "What is my name?").await.unwrap();
    assert_eq!(before, "I don't know your name yet.");
    let first = example::run(&url, "My name is Ada.").await.unwrap();
    assert_eq!(first, "Nice to meet you, Ada. I will remember that.");
    let second = example::run(&url, "What is my name?").await.unwrap();
    assert_eq!(second, "Your name is Ada.");

    // Another database knows nothing of Ada.
    let other = format!("sqlite://{}/other.db", dir.path().display());
    let stranger = example::run(&other, "What is my name?").await.unwrap();
    assert_eq!(stranger, "I don't know your name yet.");
}
