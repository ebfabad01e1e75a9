//! The relay's WebSocket against tungstenite's client (a real peer) and
//! against frames written byte by byte for what a client must not send.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncWriteExt, DuplexStream, duplex};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message as Client;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

use super::*;

const MAX: usize = 65_535;

async fn pair() -> (WireSocket<DuplexStream>, WebSocketStream<DuplexStream>) {
    let (server, client) = duplex(256 * 1024);
    let client = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
    (WireSocket::new(server, MAX), client)
}

/// A server socket and the raw client end, for frames written by hand.
fn raw() -> (WireSocket<DuplexStream>, DuplexStream) {
    let (server, client) = duplex(256 * 1024);
    (WireSocket::new(server, MAX), client)
}

/// A client's frame: `first` byte (FIN, RSV, opcode), masked `payload`.
fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut out = vec![first];
    match payload.len() {
        len @ 0..=125 => out.push(0x80 | len as u8),
        len @ 126..=65_535 => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        len => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(len as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&mask);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    out
}

async fn refused(bytes: &[u8]) -> WireError {
    let (mut server, mut client) = raw();
    client.write_all(bytes).await.expect("written");
    match tokio::time::timeout(Duration::from_secs(5), server.recv()).await {
        Ok(Some(Err(error))) => error,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn messages_from_a_real_client_arrive_whole() {
    let (mut server, mut client) = pair().await;
    let big: Vec<u8> = (0..MAX).map(|i| (i % 251) as u8).collect();
    client.send(Client::text("identify")).await.expect("sent");
    client
        .send(Client::binary(big.clone()))
        .await
        .expect("sent");
    client
        .send(Client::binary(vec![7u8; 3]))
        .await
        .expect("sent");
    assert_eq!(
        server.recv().await.expect("message").expect("valid"),
        Message::Text("identify".to_owned())
    );
    assert_eq!(
        server.recv().await.expect("message").expect("valid"),
        Message::Binary(Bytes::from(big))
    );
    assert_eq!(
        server.recv().await.expect("message").expect("valid"),
        Message::Binary(Bytes::from_static(&[7, 7, 7]))
    );
    // Nothing of a read message stays behind.
    assert!(server.reader.frame.is_none() && server.reader.head_len == 0);
}

#[tokio::test]
async fn a_ping_is_answered_and_a_close_is_read() {
    let (mut server, mut client) = pair().await;
    client
        .send(Client::Ping(Bytes::from_static(b"are you there")))
        .await
        .expect("sent");
    client
        .send(Client::Close(Some(CloseFrame {
            code: 4000.into(),
            reason: "bye".into(),
        })))
        .await
        .expect("sent");
    assert_eq!(
        server.recv().await.expect("message").expect("valid"),
        Message::Close(Some((4000, "bye".to_owned())))
    );
    assert!(server.recv().await.is_none(), "nothing after a close");
    match client.next().await {
        Some(Ok(Client::Pong(payload))) => assert_eq!(&payload[..], b"are you there"),
        other => panic!("expected the pong, got {other:?}"),
    }
}

#[tokio::test]
async fn what_the_server_writes_a_real_client_reads() {
    let (server, mut client) = pair().await;
    let (mut writer, _reader) = server.split();
    let batch = [
        Bytes::from_static(b"one"),
        Bytes::new(),
        Bytes::from(vec![9u8; MAX]),
        Bytes::from(vec![1u8; 200]),
    ];
    writer.send_binary(batch.to_vec()).await.expect("written");
    writer
        .send(Message::Text("ready".to_owned()))
        .await
        .expect("written");
    writer
        .send(Message::Close(Some((
            4102,
            "terminal_host_unavailable".to_owned(),
        ))))
        .await
        .expect("written");
    for expected in &batch {
        match client.next().await {
            Some(Ok(Client::Binary(bytes))) => assert_eq!(&bytes, expected),
            other => panic!("expected a binary message, got {other:?}"),
        }
    }
    assert!(matches!(client.next().await, Some(Ok(Client::Text(t))) if t.as_str() == "ready"));
    match client.next().await {
        Some(Ok(Client::Close(Some(frame)))) => {
            assert_eq!(u16::from(frame.code), 4102);
            assert_eq!(frame.reason.as_str(), "terminal_host_unavailable");
        }
        other => panic!("expected the close, got {other:?}"),
    }
}

#[tokio::test]
async fn a_long_close_reason_is_cut_at_a_character() {
    let payload = close_payload(Some(&(4100, "ä".repeat(100))));
    assert!(payload.len() <= MAX_CONTROL);
    assert!(std::str::from_utf8(&payload[2..]).is_ok());
    assert_eq!(close_payload(None), Vec::<u8>::new());
}

#[tokio::test]
async fn fragments_make_one_message_around_a_ping() {
    let (server, mut client) = raw();
    let mut bytes = frame(0x02, b"abc"); // binary, not final
    bytes.extend(frame(0x89, b"p")); // ping between the fragments
    bytes.extend(frame(0x00, b"def")); // continuation, not final
    bytes.extend(frame(0x80, b"g")); // continuation, final
    bytes.extend(frame(0x01, "zwei ".as_bytes())); // text, not final
    bytes.extend(frame(0x80, "Wörter".as_bytes()));
    client.write_all(&bytes).await.expect("written");
    let (mut writer, mut reader) = server.split();
    assert_eq!(
        reader.recv().await.expect("message").expect("valid"),
        Message::Ping(Bytes::from_static(b"p"))
    );
    assert_eq!(
        reader.recv().await.expect("message").expect("valid"),
        Message::Binary(Bytes::from_static(b"abcdefg"))
    );
    assert_eq!(
        reader.recv().await.expect("message").expect("valid"),
        Message::Text("zwei Wörter".to_owned())
    );
    writer.shutdown().await.expect("shut down");
}

#[tokio::test]
async fn a_read_cut_off_goes_on_where_it_stopped() {
    let (mut server, mut client) = raw();
    let bytes = frame(0x82, &[5u8; 1000]);
    client.write_all(&bytes[..3]).await.expect("written");
    let cut = tokio::time::timeout(Duration::from_millis(20), server.recv()).await;
    assert!(cut.is_err(), "half a header is no message");
    client.write_all(&bytes[3..500]).await.expect("written");
    let cut = tokio::time::timeout(Duration::from_millis(20), server.recv()).await;
    assert!(cut.is_err(), "half a payload is no message");
    client.write_all(&bytes[500..]).await.expect("written");
    assert_eq!(
        server.recv().await.expect("message").expect("valid"),
        Message::Binary(Bytes::from(vec![5u8; 1000]))
    );
}

#[tokio::test]
async fn the_end_of_the_connection_between_and_inside_frames() {
    let (mut server, client) = raw();
    drop(client);
    assert!(server.recv().await.is_none(), "ended between frames");

    let (mut server, mut client) = raw();
    let bytes = frame(0x82, &[1u8; 100]);
    client.write_all(&bytes[..50]).await.expect("written");
    drop(client);
    assert!(matches!(
        server.recv().await,
        Some(Err(WireError::Io(error))) if error.kind() == io::ErrorKind::UnexpectedEof
    ));
    assert!(server.recv().await.is_none(), "nothing after a failure");
}

#[tokio::test]
async fn what_a_client_must_not_send_is_refused() {
    let unmasked = {
        let mut bytes = vec![0x82, 3];
        bytes.extend_from_slice(b"abc");
        bytes
    };
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("unmasked", unmasked),
        ("rsv1", frame(0xC2, b"abc")),
        ("rsv3", frame(0x92, b"abc")),
        ("reserved data opcode", frame(0x83, b"abc")),
        ("reserved control opcode", frame(0x8B, b"")),
        ("fragmented ping", frame(0x09, b"p")),
        ("long ping", frame(0x89, &[0u8; 126])),
        ("continuation first", frame(0x80, b"abc")),
        ("text inside fragments", {
            let mut bytes = frame(0x02, b"abc");
            bytes.extend(frame(0x81, b"x"));
            bytes
        }),
        ("text not UTF-8", frame(0x81, &[0xC3, 0x28])),
        ("fragmented text not UTF-8", {
            let mut bytes = frame(0x01, &[0xE2, 0x82]);
            bytes.extend(frame(0x80, &[0x28]));
            bytes
        }),
        ("close of one byte", frame(0x88, &[3])),
        ("close code 1005", frame(0x88, &1005u16.to_be_bytes())),
        ("close code 999", frame(0x88, &999u16.to_be_bytes())),
        ("close reason not UTF-8", {
            let mut payload = 1000u16.to_be_bytes().to_vec();
            payload.push(0xFF);
            frame(0x88, &payload)
        }),
    ];
    for (name, bytes) in cases {
        let error = refused(&bytes).await;
        assert!(matches!(error, WireError::Protocol(_)), "{name}: {error:?}");
    }
}

#[tokio::test]
async fn a_frame_over_the_limit_is_refused_from_its_header() {
    // Only the header of a frame of MAX + 1 bytes: refused without waiting
    // for (or making room for) its payload.
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&((MAX + 1) as u64).to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    assert!(matches!(refused(&header).await, WireError::TooLarge));
    let mut huge = vec![0x82, 0x80 | 127];
    huge.extend_from_slice(&u64::MAX.to_be_bytes());
    huge.extend_from_slice(&[1, 2, 3, 4]);
    assert!(matches!(refused(&huge).await, WireError::TooLarge));
    // Fragments that together pass the limit.
    let mut bytes = frame(0x02, &vec![0u8; MAX - 10]);
    bytes.extend(frame(0x80, &[0u8; 11]));
    assert!(matches!(refused(&bytes).await, WireError::TooLarge));
    // Exactly the limit passes.
    let (mut server, mut client) = raw();
    client
        .write_all(&frame(0x82, &vec![3u8; MAX]))
        .await
        .expect("written");
    assert!(matches!(server.recv().await, Some(Ok(Message::Binary(b))) if b.len() == MAX));
}

#[test]
fn unmasking_matches_the_byte_by_byte_rule() {
    let mask = [0xA1, 0x02, 0xF3, 0x44];
    for len in [0, 1, 3, 7, 8, 9, 15, 16, 17, 100] {
        let plain: Vec<u8> = (0..len).map(|i| (i * 7 % 256) as u8).collect();
        let mut masked: Vec<u8> = plain
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ mask[i % 4])
            .collect();
        unmask(&mut masked, mask);
        assert_eq!(masked, plain, "{len} bytes");
    }
}

#[tokio::test]
async fn a_write_given_up_is_finished_before_the_close() {
    // A peer that reads nothing yet: the connection takes 64 bytes.
    let (server, client) = duplex(64);
    let (mut writer, _reader) = WireSocket::new(server, MAX).split();
    let message = Bytes::from(vec![4u8; 1000]);
    let given_up = tokio::time::timeout(
        Duration::from_millis(20),
        writer.send_binary(vec![message.clone()]),
    )
    .await;
    assert!(given_up.is_err(), "the write waits for the slow peer");
    // The relay gives up on the peer (4014) and closes: the peer still gets
    // the whole message, then the close.
    let mut client = WebSocketStream::from_raw_socket(client, Role::Client, None).await;
    let close = tokio::spawn(async move {
        writer
            .send(Message::Close(Some((4014, "slow_consumer".to_owned()))))
            .await
    });
    let wait = Duration::from_secs(5);
    match tokio::time::timeout(wait, client.next()).await {
        Ok(Some(Ok(Client::Binary(bytes)))) => assert_eq!(bytes, message),
        other => panic!("expected the whole message, got {other:?}"),
    }
    match tokio::time::timeout(wait, client.next()).await {
        Ok(Some(Ok(Client::Close(Some(frame))))) => assert_eq!(u16::from(frame.code), 4014),
        other => panic!("expected the close, got {other:?}"),
    }
    close.await.expect("joined").expect("written");
}
