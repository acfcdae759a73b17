//! The bundled compute models (`bert`, `wide_deep`, `dlrm`) served by the in-process core:
//! the zoo configs load, requests pass admission and the batcher, outputs are deterministic,
//! and a request the model rejects fails alone while the server keeps serving.

use bytes::Bytes;
use perfbench::server::infer::{InferRequest, InputData, InputTensor, OutputData};
use perfbench::server::{InferenceServer, ServerOptions};
use perfbench::tensor::Tensor;

fn request(model: &str, inputs: &[(&str, Tensor)]) -> InferRequest {
    InferRequest {
        model_name: model.into(),
        model_version: String::new(),
        id: String::new(),
        inputs: inputs
            .iter()
            .map(|(name, t)| InputTensor {
                name: name.to_string(),
                datatype: t.dtype.as_str().into(),
                shape: t.shape.clone(),
                data: InputData::Raw(t.data.clone()),
            })
            .collect(),
        outputs: vec![],
        sequence: None,
    }
}

fn raw(data: &OutputData) -> Bytes {
    match data {
        OutputData::Raw(b) => b.clone(),
        OutputData::InShm => panic!("no shm requested"),
    }
}

fn bert_inputs(first_id: i32) -> Vec<(&'static str, Tensor)> {
    let ids: Vec<i32> = (0..384).map(|i| (first_id + i * 13) % 30522).collect();
    let mask: Vec<i32> = (0..384).map(|i| (i < 200) as i32).collect();
    vec![
        ("input__0", Tensor::from_i32(vec![1, 384], &ids)),
        ("input__1", Tensor::from_i32(vec![1, 384], &[0; 384])),
        ("input__2", Tensor::from_i32(vec![1, 384], &mask)),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compute_models_serve_through_the_batcher() {
    let options =
        ServerOptions { models: vec!["bert".into(), "wide_deep".into(), "dlrm".into()], ..Default::default() };
    let server = InferenceServer::new(options).unwrap();

    // Two bert requests at once may share a batch; each gets its own deterministic logits.
    let (a, b) =
        tokio::join!(server.infer(request("bert", &bert_inputs(1))), server.infer(request("bert", &bert_inputs(2))));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.outputs.len(), 2);
    assert_eq!(a.outputs[0].name, "output__0");
    assert_eq!(a.outputs[0].shape, vec![1, 384]);
    assert_ne!(raw(&a.outputs[0].data), raw(&b.outputs[0].data));
    let again = server.infer(request("bert", &bert_inputs(1))).await.unwrap();
    assert_eq!(raw(&again.outputs[0].data), raw(&a.outputs[0].data));
    assert_eq!(raw(&again.outputs[1].data), raw(&a.outputs[1].data));

    // An out-of-range token id fails that request with a message naming it...
    let mut bad = bert_inputs(1);
    bad[0].1 = Tensor::from_i32(vec![1, 384], &[40_000; 384]);
    let err = server.infer(request("bert", &bad)).await.unwrap_err();
    assert!(err.message.contains("token id (input__0) 40000"), "{}", err.message);
    // ...and the model keeps serving.
    assert!(server.infer(request("bert", &bert_inputs(3))).await.is_ok());

    for (model, categorical) in [("wide_deep", 16), ("dlrm", 26)] {
        let num = Tensor::from_f32(vec![2, 13], &[0.5; 26]);
        let cat: Vec<i64> = (0..2 * categorical).map(|i| i * 1_000_003).collect();
        let cat = Tensor::from_i64(vec![2, categorical], &cat);
        let inputs = [("numerical_features", num), ("categorical_features", cat)];
        let response = server.infer(request(model, &inputs)).await.unwrap();
        assert_eq!(response.outputs[0].name, "click_probability");
        assert_eq!(response.outputs[0].shape, vec![2, 1]);
        let p: Vec<f32> =
            raw(&response.outputs[0].data).chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        assert!(p.iter().all(|&v| v > 0.0 && v < 1.0), "{model}: {p:?}");
    }
}
