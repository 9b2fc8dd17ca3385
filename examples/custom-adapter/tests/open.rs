//! The adapter opened by URL like ours: registered once, `mnemix::open("redb://…")` finds it.

use custom_adapter_example::DESCRIPTOR;
use mnemix::Message;

#[tokio::test]
async fn redb_urls_open_through_the_front_door_once_registered() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("redb://{}", dir.path().join("memory.redb").display());

    let unknown = mnemix::open(&url).await.unwrap_err();
    assert!(unknown.is_invalid_input(), "{unknown}");
    assert!(unknown.to_string().contains("\"redb\""), "{unknown}");

    mnemix::register(DESCRIPTOR).unwrap();
    mnemix::register(DESCRIPTOR).unwrap(); // again: nothing changes
    assert_eq!(mnemix::descriptor_for(&url).unwrap().name(), "redb");
    {
        let store = mnemix::open(&url).await.unwrap();
        assert_eq!(store.backend_name(), "redb");
        let user = store.scope("support", "user-1").unwrap();
        let thread = user.new_conversation().await.unwrap();
        user.conversation(&thread.id)
            .append([Message::user("kept in redb")])
            .await
            .unwrap();
    }
    // Reopened by URL: what the first store wrote is there.
    let store = mnemix::open(&url).await.unwrap();
    let user = store.scope("support", "user-1").unwrap();
    let threads = user.conversations().await.unwrap();
    assert_eq!(threads.items.len(), 1);
    let window = user
        .conversation(&threads.items[0].id)
        .load()
        .await
        .unwrap();
    assert_eq!(window.len(), 1);

    // A missing file through options that must not create one is NotFound, and nothing is made.
    let missing = dir.path().join("missing.redb");
    let refused = mnemix::OpenOptions::new(format!("redb://{}", missing.display()))
        .create_if_missing(false)
        .open()
        .await
        .unwrap_err();
    assert!(refused.is_not_found(), "{refused}");
    assert!(!missing.exists());
}
